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
  // The submit preview's "use <type>": set the form's type and let the preview ask again.
  document.addEventListener("click", function (e) {
    var button = e.target instanceof Element ? e.target.closest("[data-set-type]") : null;
    var select = document.getElementById("id_type");
    if (!button || !select) return;
    select.value = button.getAttribute("data-set-type");
    var more = select.closest("details");
    if (more) more.open = true;
    select.dispatchEvent(new Event("change", { bubbles: true }));
  });
})();
