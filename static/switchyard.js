// Behaviour every page shares, kept out of the HTML: the Content-Security-Policy runs no
// inline script or event handler (docs/security.md).
(function () {
  // A filter <select data-autosubmit> applies as soon as it changes.
  document.addEventListener("change", function (e) {
    var el = e.target;
    if (el instanceof HTMLSelectElement && el.hasAttribute("data-autosubmit") && el.form) {
      el.form.submit();
    }
  });
})();
