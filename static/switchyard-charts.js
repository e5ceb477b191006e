// Draw every plotly figure on the page (data-figure holds its JSON), and again after htmx
// swaps new ones in.
(function () {
  function draw(root) {
    if (!window.Plotly) return;
    root.querySelectorAll("[data-figure]").forEach(function (el) {
      var fig = JSON.parse(el.getAttribute("data-figure"));
      window.Plotly.react(el, fig.data, fig.layout, { displaylogo: false, responsive: true });
    });
  }
  document.addEventListener("DOMContentLoaded", function () { draw(document); });
  document.addEventListener("htmx:afterSwap", function (e) { draw(e.target); });
})();
