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

  // <time datetime=… data-relative>: "3 min ago", moved on every 30 s. The words are those of
  // scheduling/presenters/task_list.py `ago`: keep the two in step.
  function ago(seconds) {
    if (seconds < 60) return "just now";
    if (seconds < 3600) return Math.floor(seconds / 60) + " min ago";
    if (seconds < 86400) return Math.floor(seconds / 3600) + " h ago";
    var days = Math.floor(seconds / 86400);
    return days + (days === 1 ? " day ago" : " days ago");
  }
  function refreshTimes() {
    var now = Date.now();
    document.querySelectorAll("time[data-relative]").forEach(function (el) {
      var at = Date.parse(el.getAttribute("datetime"));
      if (!isNaN(at)) el.textContent = ago(Math.max(0, Math.floor((now - at) / 1000)));
    });
  }
  setInterval(refreshTimes, 30000);

  // The task list's ticks: the rows are replaced every 2 s, the ticks must survive that; the
  // bulk cancel button says how many are ticked.
  var ticked = new Set();
  function countTicks() {
    var button = document.getElementById("bulk-cancel-button");
    if (!button) return;
    button.disabled = ticked.size === 0;
    var n = ticked.size;
    button.textContent = n ? "Cancel " + n + (n === 1 ? " task" : " tasks") : "Cancel the ticked tasks";
  }
  document.addEventListener("change", function (e) {
    var el = e.target;
    if (!(el instanceof HTMLInputElement) || !el.classList.contains("tick")) return;
    if (el.checked) ticked.add(el.value);
    else ticked.delete(el.value);
    countTicks();
  });
  document.addEventListener("htmx:afterSwap", function (e) {
    if (!e.target || e.target.id !== "task-rows") return;
    var present = new Set();
    e.target.querySelectorAll("input.tick").forEach(function (el) {
      present.add(el.value);
      el.checked = ticked.has(el.value);
    });
    // A task that ended meanwhile has no tick any more: it is no longer counted.
    ticked.forEach(function (id) { if (!present.has(id)) ticked.delete(id); });
    countTicks();
  });
  document.addEventListener("DOMContentLoaded", function () {
    document.querySelectorAll("input.tick:checked").forEach(function (el) { ticked.add(el.value); });
    countTicks();
  });
})();
