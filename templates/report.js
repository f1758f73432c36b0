// Optional conveniences for the incident report; the page is complete without them.
(function () {
  "use strict";
  var doc = document;

  Array.prototype.forEach.call(doc.querySelectorAll("[data-js-only]"), function (el) {
    el.hidden = false;
  });

  function setAllDetails(open) {
    Array.prototype.forEach.call(doc.querySelectorAll("details"), function (el) {
      el.open = open;
    });
  }
  doc.getElementById("expand-all").addEventListener("click", function () { setAllDetails(true); });
  doc.getElementById("collapse-all").addEventListener("click", function () { setAllDetails(false); });
  // Closed <details> would print as one line each; a printed report should show everything.
  window.addEventListener("beforeprint", function () { setAllDetails(true); });

  // A query of digits, commas and dashes is a rank range ("3,5-7"); anything else is text.
  function parseRanges(query) {
    if (!/^[0-9,\s-]+$/.test(query)) { return null; }
    var ranges = [];
    query.split(",").forEach(function (part) {
      var m = /^\s*(\d+)\s*(?:-\s*(\d+))?\s*$/.exec(part);
      if (m) { ranges.push([Number(m[1]), Number(m[2] === undefined ? m[1] : m[2])]); }
    });
    return ranges;
  }

  var filter = doc.getElementById("rank-filter");
  var status = doc.getElementById("rank-filter-status");
  var rows = doc.querySelectorAll("#rank-table tbody tr");
  filter.addEventListener("input", function () {
    var query = filter.value.trim().toLowerCase();
    var ranges = parseRanges(query);
    var shown = 0;
    Array.prototype.forEach.call(rows, function (row) {
      var match;
      if (!query) {
        match = true;
      } else if (ranges) {
        var rank = Number(row.getAttribute("data-rank"));
        match = ranges.some(function (r) { return rank >= r[0] && rank <= r[1]; });
      } else {
        match = row.textContent.toLowerCase().indexOf(query) >= 0;
      }
      row.hidden = !match;
      if (match) { shown += 1; }
    });
    status.textContent = query ? shown + " of " + rows.length + " shown" : "";
  });

  var data = doc.getElementById("diagnosis-json");
  doc.getElementById("download-json").href =
    "data:application/json;charset=utf-8," + encodeURIComponent(data.textContent);
})();
