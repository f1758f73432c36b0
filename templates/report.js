// Optional conveniences for the incident report; the page is complete without them.
// Log text only ever reaches the page through textContent, never as markup.
(function () {
  "use strict";
  var doc = document;
  var PAGE = 100;

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

  function matcher(query) {
    var ranges = parseRanges(query);
    return function (rank, text) {
      if (!query) { return true; }
      if (ranges) {
        // A number is a rank, or a pid (a whole cell): "4105" finds the process with that pid.
        return ranges.some(function (r) { return rank >= r[0] && rank <= r[1]; }) ||
          ("\t" + text + "\t").indexOf("\t" + query + "\t") >= 0;
      }
      return text.toLowerCase().indexOf(query) >= 0;
    };
  }

  function num(value) { return value === null || value === undefined ? "" : Number(value).toLocaleString("en-US"); }
  function text(value) { return value === null || value === undefined ? "" : String(value); }
  function unknown(value) { return value === null || value === undefined ? "?" : String(value); }

  // Row builders mirror the server-side cells of each paged table (report/html.py).
  var BUILDERS = {
    "rank-table": function (data) {
      var v = data.verdict;
      return data.ranks.map(function (r) {
        var culprit = r.rank !== null ? v.culprit_ranks.indexOf(r.rank) >= 0
          : v.culprit_pids.indexOf(r.pid) >= 0;
        var gpu = r.devices.join(",");
        if (r.bus_ids.length) { gpu = gpu ? gpu + " (" + r.bus_ids.join(",") + ")" : r.bus_ids.join(","); }
        return {
          rank: r.rank === null ? NaN : r.rank,
          cls: culprit ? "culprit" : "",
          cells: [unknown(r.rank), r.host || "?", unknown(r.pid), gpu,
            text(r.last_collective), text(r.state), text(r.first_error)]
        };
      });
    },
    "comm-table": function (data) {
      return data.communicators.map(function (c) {
        var progress = c.last_op_counts.map(function (g) {
          return g.ranks + " at " + (g.collective ? g.collective + " " : "") + "#" + g.op_count +
            " (0x" + g.op_count.toString(16) + ")";
        }).join("; ");
        var transports = Object.keys(c.transports).sort().map(function (k) {
          return k + " " + c.transports[k];
        }).join(", ");
        return {
          rank: NaN, cls: "", bad: [4, 5],
          cells: [c.id, unknown(c.nranks), c.ranks_seen, c.init_complete, c.init_missing,
            c.aborted, progress, text(c.channels), transports]
        };
      });
    },
    "input-table": function (data) {
      var errors = data.inputs.some(function (i) { return i.error; });
      return data.inputs.map(function (i) {
        var cells = [i.source, i.kind, num(i.lines), num(i.recognized), num(i.unrecognized), num(i.blank)];
        if (errors) { cells.push(text(i.error)); }
        return { rank: NaN, cls: "", bad: errors ? [6] : [], cells: cells };
      });
    }
  };

  function Pager(pager, data) {
    this.table = doc.getElementById(pager.getAttribute("data-table"));
    this.body = this.table.querySelector("tbody");
    this.numeric = Array.prototype.map.call(this.table.querySelectorAll("thead th"), function (th) {
      return th.classList.contains("num");
    });
    this.status = pager.querySelector(".pager-status");
    this.rows = BUILDERS[this.table.id](data);
    this.shown = this.rows;
    this.page = 0;
    var self = this;
    pager.querySelector(".prev").addEventListener("click", function () { self.go(self.page - 1); });
    pager.querySelector(".next").addEventListener("click", function () { self.go(self.page + 1); });
    this.go(0);
  }
  Pager.prototype.filter = function (match) {
    this.match = match;
    this.shown = this.rows.filter(function (row) { return match(row.rank, row.cells.join("\t")); });
    this.go(0);
  };
  Pager.prototype.go = function (page) {
    var pages = Math.max(1, Math.ceil(this.shown.length / PAGE));
    this.page = Math.min(Math.max(page, 0), pages - 1);
    var start = this.page * PAGE;
    var slice = this.shown.slice(start, start + PAGE);
    // The blamed processes stay in the table on every page, on screen and on paper.
    var pinned = this.shown.filter(function (row) { return row.cls === "culprit" && slice.indexOf(row) < 0; });
    slice = slice.concat(pinned);
    var fragment = doc.createDocumentFragment();
    var numeric = this.numeric;
    this.body.textContent = "";  // before the new rows take the anchors (id="rank-N")
    slice.forEach(function (row) {
      var tr = doc.createElement("tr");
      if (row.cls) { tr.className = row.cls; }
      if (!isNaN(row.rank)) {
        tr.setAttribute("data-rank", String(row.rank));
        if (!doc.getElementById("rank-" + row.rank)) { tr.id = "rank-" + row.rank; }
      }
      row.cells.forEach(function (value, i) {
        var td = doc.createElement("td");
        td.textContent = value;
        if (numeric[i]) { td.className = "num"; }
        if (row.bad && row.bad.indexOf(i) >= 0 && value) { td.className = "bad"; }
        tr.appendChild(td);
      });
      fragment.appendChild(tr);
    });
    this.body.appendChild(fragment);
    this.status.textContent = this.shown.length
      ? "rows " + (start + 1) + "-" + (start + slice.length - pinned.length) + " of " + this.shown.length +
        (pinned.length ? " (and the culprit's row)" : "") +
        (this.shown.length < this.rows.length ? " (filtered from " + this.rows.length + ")" : "")
      : "no rows match";
  };

  var filter = doc.getElementById("rank-filter");
  var filterStatus = doc.getElementById("rank-filter-status");
  var rankPager = null;
  filter.addEventListener("input", function () {
    var query = filter.value.trim().toLowerCase();
    var match = matcher(query);
    if (rankPager) {
      rankPager.filter(match);
      filterStatus.textContent = query ? rankPager.shown.length + " of " + rankPager.rows.length + " shown" : "";
      return;
    }
    var rows = doc.querySelectorAll("#rank-table tbody tr");
    var shown = 0;
    Array.prototype.forEach.call(rows, function (row) {
      var cells = Array.prototype.map.call(row.cells, function (c) { return c.textContent; });
      var ok = match(Number(row.getAttribute("data-rank")), cells.join("\t"));
      row.hidden = !ok;
      if (ok) { shown += 1; }
    });
    filterStatus.textContent = query ? shown + " of " + rows.length + " shown" : "";
  });

  // A rank, host, pid or communicator link goes to its row: the rank table opens, and a
  // row that the pager does not show is brought up by filtering the table for it.
  function follow(event) {
    var link = event.target.closest ? event.target.closest("a.xref") : null;
    if (!link) { return; }
    var target = doc.getElementById(link.getAttribute("href").slice(1));
    var holder = target ? target.closest("details") : null;
    if (holder) { holder.open = true; }
    if (target && target.tagName === "TR" && !target.hidden) { return; }
    var details = doc.getElementById("rank-details");
    if (!details || link.getAttribute("href").indexOf("#rank") !== 0) { return; }
    event.preventDefault();
    details.open = true;
    filter.value = link.getAttribute("data-filter") || "";
    filter.dispatchEvent(new Event("input"));
    var row = doc.getElementById(link.getAttribute("href").slice(1)) || doc.getElementById("ranks");
    row.scrollIntoView({ block: "center" });
    if (history.replaceState) { history.replaceState(null, "", link.getAttribute("href")); }
  }
  doc.addEventListener("click", follow);

  // Sortable tables: a click on a column heading sorts by it, a second click reverses.
  function cellKey(value, numeric) {
    if (numeric) { var n = Number(String(value).replace(/[,\s]/g, "")); return isNaN(n) ? -Infinity : n; }
    var m = /^-?\d+/.exec(String(value));
    return m ? Number(m[0]) : String(value).toLowerCase();
  }
  function compare(a, b) {
    if (typeof a === typeof b) { return a < b ? -1 : a > b ? 1 : 0; }
    return typeof a === "number" ? -1 : 1;
  }
  var pagers = {};
  Array.prototype.forEach.call(doc.querySelectorAll("table.sortable thead th"), function (th, _) {
    th.setAttribute("tabindex", "0");
    th.setAttribute("aria-sort", "none");
    th.title = "sort by this column";
    th.addEventListener("click", function () {
      var table = th.closest("table");
      var index = Array.prototype.indexOf.call(th.parentNode.children, th);
      var numeric = th.classList.contains("num");
      var order = th.getAttribute("aria-sort") === "ascending" ? -1 : 1;
      Array.prototype.forEach.call(th.parentNode.children, function (o) { o.setAttribute("aria-sort", "none"); });
      th.setAttribute("aria-sort", order === 1 ? "ascending" : "descending");
      var pager = pagers[table.id];
      if (pager) {
        pager.rows.sort(function (a, b) { return order * compare(cellKey(a.cells[index], numeric), cellKey(b.cells[index], numeric)); });
        pager.filter(pager.match || function () { return true; });
        return;
      }
      var body = table.querySelector("tbody");
      var rows = Array.prototype.slice.call(body.rows);
      rows.sort(function (a, b) {
        return order * compare(cellKey(a.cells[index] ? a.cells[index].textContent : "", numeric),
          cellKey(b.cells[index] ? b.cells[index].textContent : "", numeric));
      });
      rows.forEach(function (row) { body.appendChild(row); });
    });
  });

  function ready(json, data) {
    var link = doc.getElementById("download-json");
    link.href = URL.createObjectURL(new Blob([json], { type: "application/json" }));
    Array.prototype.forEach.call(doc.querySelectorAll(".pager[data-table]"), function (el) {
      var pager = new Pager(el, data);
      pagers[pager.table.id] = pager;
      if (pager.table.id === "rank-table") { rankPager = pager; }
    });
    // The report benchmark reads this mark: the time from navigation until the page is usable.
    if (window.performance && performance.mark) { performance.mark("logsleuth-ready"); }
    doc.documentElement.setAttribute("data-ready", "1");
  }

  // Large reports carry their JSON gzip-compressed (base64); the browser inflates it locally.
  var payload = doc.getElementById("diagnosis-json");
  if (payload.type === "application/json") {
    ready(payload.textContent, JSON.parse(payload.textContent));
  } else {
    var binary = atob(payload.textContent.trim());
    var bytes = new Uint8Array(binary.length);
    for (var i = 0; i < binary.length; i += 1) { bytes[i] = binary.charCodeAt(i); }
    var stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("gzip"));
    new Response(stream).text().then(function (json) { ready(json, JSON.parse(json)); });
  }
})();
