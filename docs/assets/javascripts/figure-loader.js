// Figures draw when they come within a screen of the window, and plotly.js (the script's data-plotly) loads with
// the first of them: a page whose first screen shows no figure reaches its load event without plotly.js, and a
// figure far down the page costs nothing until the reader scrolls towards it. Each figure's own script queues
// its drawing in window.pu1Figures as [container id, draw]; once drawn, the container gets a "pu1-figure-drawn"
// event (figure-palette.js gives it the page's palette).
(function () {
  var plotlyUrl = document.currentScript.dataset.plotly;
  var plotlyLoaded = null;
  var draws = new Map();

  function plotly() {
    if (!plotlyLoaded) {
      plotlyLoaded = new Promise(function (resolve, reject) {
        var script = document.createElement("script");
        script.src = plotlyUrl;
        script.onload = resolve;
        script.onerror = function () { reject(new Error("the figures' plotly.js did not load from " + plotlyUrl)); };
        document.head.appendChild(script);
      });
    }
    return plotlyLoaded;
  }

  function draw(figure) {
    var drawFigure = draws.get(figure);
    draws.delete(figure);
    plotly().then(function () {
      drawFigure();
      figure.dispatchEvent(new CustomEvent("pu1-figure-drawn", {bubbles: true}));
    }).catch(function (error) { console.error(error.message); });
  }

  var nearTheWindow = new IntersectionObserver(function (entries) {
    entries.forEach(function (entry) {
      if (!entry.isIntersecting) return;
      nearTheWindow.unobserve(entry.target);
      draw(entry.target);
    });
  }, {rootMargin: "100% 0px"});

  function observe(queued) {
    var figure = document.getElementById(queued[0]);
    if (!figure) return;
    draws.set(figure, queued[1]);
    nearTheWindow.observe(figure);
  }

  // the figures' scripts ran while the page was parsed, before this deferred script; any later one pushes here
  var queued = window.pu1Figures || [];
  window.pu1Figures = {push: observe};
  queued.forEach(observe);
})();
