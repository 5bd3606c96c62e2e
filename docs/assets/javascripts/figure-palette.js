// Figures follow the site's palette: in the dark palette (slate) their backgrounds, text and grid
// turn dark; back in the light palette they get their own colours again.
(function () {
  var DARK = {paper: "#1e2129", plot: "#232733", font: "#e2e4e9", grid: "#3b4050"};

  function isDark() {
    return document.body.getAttribute("data-md-color-scheme") === "slate";
  }

  function axesOf(layout) {
    return Object.keys(layout).filter(function (key) { return /^[xy]axis\d*$/.test(key); });
  }

  function restyle(figure) {
    if (!figure._fullLayout || !window.Plotly || isDark() === Boolean(figure.__lightLayout)) return;
    var update = {};
    if (isDark()) {
      var light = {paper_bgcolor: figure.layout.paper_bgcolor, plot_bgcolor: figure.layout.plot_bgcolor,
                   "font.color": (figure.layout.font || {}).color};
      update = {paper_bgcolor: DARK.paper, plot_bgcolor: DARK.plot, "font.color": DARK.font};
      axesOf(figure._fullLayout).forEach(function (axis) {
        light[axis + ".gridcolor"] = (figure.layout[axis] || {}).gridcolor;
        light[axis + ".linecolor"] = (figure.layout[axis] || {}).linecolor;
        update[axis + ".gridcolor"] = DARK.grid;
        update[axis + ".linecolor"] = DARK.grid;
      });
      figure.__lightLayout = light;
    } else {
      // null gives an attribute the figure did not set back to plotly's default
      Object.keys(figure.__lightLayout).forEach(function (key) {
        var value = figure.__lightLayout[key];
        update[key] = value === undefined ? null : value;
      });
      figure.__lightLayout = null;
    }
    window.Plotly.relayout(figure, update);
  }

  function restyleAll() {
    document.querySelectorAll(".js-plotly-plot").forEach(restyle);
  }

  // a figure drawn when it came near the window (figure-loader.js)
  document.addEventListener("pu1-figure-drawn", function (event) { restyle(event.target); });
  document.addEventListener("DOMContentLoaded", function () {
    new MutationObserver(restyleAll).observe(document.body, {attributes: true, attributeFilter: ["data-md-color-scheme"]});
  });
})();
