// The overview's charts: a sparkline per signal and the trend charts,
// drawn with uPlot from /overview/series.json (the last 24 hours of minute
// buckets). The numbers beside them refresh through htmx and never touch
// the charts; the charts fetch their data again every minute, the
// history's resolution. Nothing here is needed to read the numbers.
(function () {
  "use strict";
  var root = document.getElementById("overview");
  if (!root || typeof uPlot !== "function") {
    return;
  }
  var src = root.getAttribute("data-series-url");
  var ink = "#0a4fb4", second = "#b45309", grid = "#e3e7ec";
  var charts = [];
  var last = null;

  function points(series) {
    // Values are numbers or null (a gap in the history).
    return [series.t, series.v];
  }

  function clear(el) {
    while (el.firstChild) {
      el.removeChild(el.firstChild);
    }
  }

  function range(data) {
    return function () { return [data.from, data.to]; };
  }

  function spark(el, data) {
    var s = data.series[el.getAttribute("data-series")];
    if (!s || s.t.length === 0) {
      return;
    }
    clear(el);
    charts.push(new uPlot({
      width: Math.max(el.clientWidth, 120),
      height: 44,
      cursor: { show: false },
      legend: { show: false },
      select: { show: false },
      axes: [{ show: false }, { show: false }],
      scales: { x: { time: true, range: range(data) }, y: { range: function (u, min, max) { return [0, Math.max(max, 1)]; } } },
      series: [{}, { stroke: ink, width: 1.5, fill: "rgba(10,79,180,0.12)", points: { show: false } }]
    }, points(s), el));
  }

  function trend(el, data) {
    var names = el.getAttribute("data-series").split(",");
    var labels = el.getAttribute("data-units").split(",");
    var first = data.series[names[0]];
    if (!first || first.t.length === 0) {
      return;
    }
    clear(el);
    // Series of one chart share their minutes (one round records them
    // all); a second series is drawn on its own scale on the right.
    var cols = [first.t, first.v];
    var series = [{}, { label: labels[0], stroke: ink, width: 1.5, scale: "a" }];
    var axes = [{ stroke: "#4a5563", grid: { stroke: grid } }, { scale: "a", stroke: "#4a5563", grid: { stroke: grid }, size: 56 }];
    if (names.length > 1) {
      var other = data.series[names[1]] || { t: [], v: [] };
      var byT = {};
      other.t.forEach(function (t, i) { byT[t] = other.v[i]; });
      cols.push(first.t.map(function (t) { return t in byT ? byT[t] : null; }));
      series.push({ label: labels[1], stroke: second, width: 1.5, dash: [6, 3], scale: "b" });
      axes.push({ scale: "b", side: 1, stroke: second, grid: { show: false }, size: 56 });
    }
    charts.push(new uPlot({
      width: Math.max(el.clientWidth, 200),
      height: 170,
      scales: { x: { time: true, range: range(data) }, a: { range: function (u, min, max) { return [0, Math.max(max, 1)]; } },
        b: { range: function (u, min, max) { return [0, Math.max(max, 1)]; } } },
      axes: axes,
      series: series
    }, cols, el));
  }

  function draw(data) {
    charts.forEach(function (c) { c.destroy(); });
    charts = [];
    root.querySelectorAll(".spark").forEach(function (el) { spark(el, data); });
    root.querySelectorAll(".chart").forEach(function (el) { trend(el, data); });
  }

  function load() {
    fetch(src, { credentials: "same-origin", headers: { "Accept": "application/json" } })
      .then(function (r) {
        if (r.status === 401) {
          // The session ended: the page leads to the login and back.
          window.location.reload();
          return null;
        }
        return r.ok ? r.json() : null;
      })
      .then(function (data) {
        if (data) {
          last = data;
          draw(data);
        }
      })
      .catch(function () { /* the next minute tries again */ });
  }

  var resizing = 0;
  window.addEventListener("resize", function () {
    clearTimeout(resizing);
    resizing = setTimeout(function () { if (last) { draw(last); } }, 200);
  });
  load();
  setInterval(load, 60000);
})();
