// Live updates for the walq dashboard. Every page reads without this
// script; with it, the parts of a page that show a queue's counts follow
// the queue through the server's event stream. The stream is closed while
// the tab is hidden and opened again when it shows.
(function () {
  "use strict";
  var live = document.getElementById("live");
  if (!live || !window.EventSource) {
    return;
  }
  var url = live.getAttribute("data-events");
  var source = null;

  function apply(event) {
    var patches;
    try {
      patches = JSON.parse(event.data);
    } catch (e) {
      return;
    }
    patches.forEach(function (p) {
      var old = document.getElementById(p.id);
      if (!old) {
        return;
      }
      // The fragment is rendered by the server's templates, which escape
      // every value; a template element parses it without running it.
      var t = document.createElement("template");
      t.innerHTML = p.html;
      var fresh = t.content.firstElementChild;
      if (fresh && fresh.id === p.id) {
        old.replaceWith(fresh);
      }
    });
    live.setAttribute("data-updated", String(Date.now()));
  }

  function open() {
    if (source) {
      return;
    }
    source = new EventSource(url);
    source.addEventListener("patch", apply);
    live.setAttribute("data-state", "open");
  }

  function close() {
    if (source) {
      source.close();
      source = null;
    }
    live.setAttribute("data-state", "closed");
  }

  document.addEventListener("visibilitychange", function () {
    if (document.hidden) {
      close();
    } else {
      open();
    }
  });
  if (!document.hidden) {
    open();
  }
})();
