// flowli dashboard: a run's page follows its journal over server-sent events (no framework).
// "entry" events carry a new timeline row, "state" the run's live section, "end" closes.
(function () {
  "use strict";
  var table = document.querySelector("table[data-events]");
  if (!table || !window.EventSource) return;
  var source = new EventSource(table.getAttribute("data-events"));
  source.addEventListener("entry", function (ev) {
    document.getElementById("timeline-rows").insertAdjacentHTML("afterbegin", ev.data);
  });
  source.addEventListener("state", function (ev) {
    var live = document.getElementById("live");
    if (live && !live.contains(document.activeElement)) live.outerHTML = ev.data;
    else if (live) live.setAttribute("data-stale", "1");
  });
  source.addEventListener("end", function () { source.close(); });
})();
