// A notebook page draws a cell only once it comes near the screen (figures.css), so the cells just above a
// linked heading can change height a few frames after the browser has scrolled to it. Until the heading has held
// still for ten frames it is scrolled to again, for at most a second and a half, and never once the reader scrolls.
(function () {
  var STILL_FRAMES = 10, MAX_FRAMES = 90;
  var reader = false;
  ["wheel", "touchstart", "keydown", "mousedown"].forEach(function (type) {
    window.addEventListener(type, function () { reader = true; }, {passive: true});
  });

  function settle() {
    var id = decodeURIComponent(location.hash.slice(1));
    var heading = id ? document.getElementById(id) : null;
    if (!heading) return;
    reader = false;
    var frames = 0, still = 0, last = null;
    function check() {
      if (reader) return;
      var top = heading.getBoundingClientRect().top;
      if (last !== null && Math.abs(top - last) < 1) {
        still += 1;
      } else {
        still = 0;
        heading.scrollIntoView();
        top = heading.getBoundingClientRect().top;
      }
      last = top;
      if (still < STILL_FRAMES && ++frames < MAX_FRAMES) requestAnimationFrame(check);
    }
    requestAnimationFrame(check);
  }

  window.addEventListener("load", settle);
  window.addEventListener("hashchange", settle);
})();
