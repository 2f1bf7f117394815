// flowli dashboard: live pages over server-sent events (no framework).
// A run's page: "entry" events carry a new timeline row, "state" the run's live section, "end"
// closes. The runs list: "run" events carry a run's new row (empty: it left the filters),
// "counts" the counts per status. The overview: "state" events carry its figures again.
(function () {
  "use strict";
  if (!window.EventSource) return;
  var timeline = document.querySelector("table[data-events]");
  if (timeline) {
    var source = new EventSource(timeline.getAttribute("data-events"));
    source.addEventListener("entry", function (ev) {
      document.getElementById("timeline-rows").insertAdjacentHTML("afterbegin", ev.data);
    });
    source.addEventListener("state", function (ev) {
      var live = document.getElementById("live");
      if (live && !live.contains(document.activeElement)) live.outerHTML = ev.data;
    });
    source.addEventListener("end", function () { source.close(); });
  }
  var runs = document.querySelector("table[data-runs-events]");
  if (runs) {
    var feed = new EventSource(runs.getAttribute("data-runs-events"));
    var rows = document.getElementById("runs-rows");
    feed.addEventListener("run", function (ev) {
      var change = JSON.parse(ev.data);
      var row = document.getElementById("run-" + change.eid);
      if (row && change.html) row.outerHTML = change.html;
      else if (row) row.remove();
      else if (change.html) {
        rows.insertAdjacentHTML("afterbegin", change.html);
        var none = document.getElementById("no-runs");
        if (none) none.remove();
      }
    });
    feed.addEventListener("counts", function (ev) {
      var counts = document.getElementById("run-counts");
      if (counts) counts.outerHTML = ev.data;
    });
  }
  var figures = document.querySelector("[data-live-events]");
  if (figures) {
    var stream = new EventSource(figures.getAttribute("data-live-events"));
    var id = figures.id;
    stream.addEventListener("state", function (ev) {
      var shown = document.getElementById(id);
      if (shown && !shown.contains(document.activeElement)) shown.outerHTML = ev.data;
    });
  }
})();
