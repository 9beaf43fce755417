// Refreshes the overview's live part every 2 seconds without reloading the page.
(function () {
  "use strict";
  var live = document.getElementById("live");
  if (!live) return;
  var src = live.getAttribute("data-src");
  var busy = false;
  setInterval(function () {
    if (busy || document.hidden) return;
    busy = true;
    fetch(src, { credentials: "same-origin", headers: { "Accept": "text/html" } })
      .then(function (r) { return r.ok ? r.text() : null; })
      .then(function (html) {
        if (html !== null) {
          live.innerHTML = html;
          live.setAttribute("data-refreshed", String(Date.now()));
        }
      })
      .catch(function () {})
      .then(function () { busy = false; });
  }, 2000);
})();
