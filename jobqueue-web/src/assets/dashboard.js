// The dashboard's only script. The pages work without it; it adds:
// - the refresh of a page's live part (#live) every few seconds, with a Pause/Resume
//   control and a choice of interval kept in localStorage. It never refreshes while the
//   tab is hidden, while a job is ticked or while a form field has the focus, so that a
//   selection or a half-typed filter is never lost;
// - "select every job on this page" on the job list;
// - the job list's queue and kind pickers' names, read when a picker is first used.
(function () {
  "use strict";

  var INTERVALS = ["2", "5", "15", "off"];
  var KEY_INTERVAL = "jobqueue.refresh.interval";
  var KEY_PAUSED = "jobqueue.refresh.paused";

  function stored(key, fallback) {
    try {
      var v = window.localStorage.getItem(key);
      return v === null ? fallback : v;
    } catch (e) {
      return fallback;
    }
  }

  function store(key, value) {
    try {
      if (value === null) window.localStorage.removeItem(key);
      else window.localStorage.setItem(key, value);
    } catch (e) { /* storage disabled: the choice lasts for this page */ }
  }

  // "Select every job on this page", and the count of selected jobs. Set up again after
  // each refresh, which replaces the table.
  function setUpSelection(root) {
    var all = root.querySelector("input.select-all");
    if (!all) return;
    var boxes = root.querySelectorAll("input[type=checkbox][name=id]");
    all.hidden = boxes.length === 0;
    function sync() {
      var ticked = 0;
      for (var i = 0; i < boxes.length; i++) if (boxes[i].checked) ticked++;
      all.checked = ticked > 0 && ticked === boxes.length;
      all.indeterminate = ticked > 0 && ticked < boxes.length;
    }
    all.addEventListener("change", function () {
      for (var i = 0; i < boxes.length; i++) boxes[i].checked = all.checked;
      sync();
    });
    for (var i = 0; i < boxes.length; i++) boxes[i].addEventListener("change", sync);
    sync();
  }

  // The pickers' lists name where their names are (data-src, one answer for both lists,
  // each taking its data-field); they are read once, when a picker first gets the focus
  // or a click, so that the page itself reads none. A failed read is tried again at the
  // next use.
  function setUpPickers() {
    var lists = document.querySelectorAll("datalist[data-src]");
    if (lists.length === 0) return;
    var asked = false;
    function load() {
      if (asked) return;
      asked = true;
      fetch(lists[0].getAttribute("data-src"), {
        credentials: "same-origin",
        headers: { "Accept": "application/json" }
      })
        .then(function (r) { return r.ok ? r.json() : null; })
        .then(function (names) {
          if (!names) {
            asked = false;
            return;
          }
          for (var i = 0; i < lists.length; i++) {
            var list = lists[i];
            var values = names[list.getAttribute("data-field")] || [];
            list.textContent = "";
            for (var j = 0; j < values.length; j++) {
              var o = document.createElement("option");
              o.value = values[j];
              list.appendChild(o);
            }
            list.setAttribute("data-loaded", "1");
          }
        })
        .catch(function () { asked = false; });
    }
    for (var i = 0; i < lists.length; i++) {
      var input = document.querySelector("input[list='" + lists[i].id + "']");
      if (!input) continue;
      input.addEventListener("focus", load);
      input.addEventListener("pointerdown", load);
    }
  }
  setUpPickers();

  var live = document.getElementById("live");
  if (!live) return;
  setUpSelection(live);

  // The overview names the address of its live part; other pages read their own address
  // again and take its live part.
  var src = live.getAttribute("data-src");
  var interval = stored(KEY_INTERVAL, "5");
  if (INTERVALS.indexOf(interval) < 0) interval = "5";
  var paused = stored(KEY_PAUSED, "") === "1";
  var busy = false;
  var lastTry = Date.now();
  var lastRefresh = 0;
  var refreshes = 0;
  var skipped = 0;

  // The control: a Pause/Resume button, the interval, and what the refresh is doing.
  var control = document.createElement("div");
  control.className = "refresh";
  var button = document.createElement("button");
  button.type = "button";
  button.className = "refresh-toggle";
  var label = document.createElement("label");
  label.appendChild(document.createTextNode("every "));
  var select = document.createElement("select");
  select.className = "refresh-interval";
  select.setAttribute("aria-label", "Refresh interval");
  INTERVALS.forEach(function (v) {
    var o = document.createElement("option");
    o.value = v;
    o.textContent = v === "off" ? "off" : v + " s";
    select.appendChild(o);
  });
  select.value = interval;
  label.appendChild(select);
  var state = document.createElement("span");
  state.className = "refresh-state muted";
  state.setAttribute("role", "status");
  control.appendChild(button);
  control.appendChild(label);
  control.appendChild(state);
  // Beside the page's title, in a row of their own.
  var h1 = document.querySelector("main h1");
  if (h1) {
    var row = document.createElement("div");
    row.className = "title-row";
    h1.parentNode.insertBefore(row, h1);
    row.appendChild(h1);
    row.appendChild(control);
  } else {
    live.parentNode.insertBefore(control, live);
  }

  // Why the page does not refresh now, or "" when it may.
  function holdReason() {
    if (paused) return "paused";
    if (interval === "off") return "off";
    if (document.hidden) return "hidden";
    if (live.querySelector("input[type=checkbox]:checked")) return "jobs selected";
    var a = document.activeElement;
    // A field being typed in or chosen from; a box ticked and unticked again, or a button
    // pressed, is no edit in progress.
    var typing = a && /^(INPUT|SELECT|TEXTAREA)$/.test(a.tagName) &&
      !/^(checkbox|radio|submit|button|reset)$/.test(a.type);
    if (typing && a !== select) {
      return "editing";
    }
    return "";
  }

  function time(d) {
    return d.toTimeString().slice(0, 8);
  }

  function show() {
    button.textContent = paused ? "Resume" : "Pause";
    button.setAttribute("aria-pressed", paused ? "true" : "false");
    var why = holdReason();
    var text;
    if (why === "paused") text = "paused";
    else if (why === "off") text = "not refreshing";
    else if (why === "jobs selected") text = "paused while jobs are selected";
    else if (why === "editing") text = "paused while you type";
    else text = "live";
    if (lastRefresh > 0) text += " · updated " + time(new Date(lastRefresh));
    state.textContent = text;
    live.setAttribute("data-refresh-state", why === "" ? "on" : why);
  }

  function refresh() {
    busy = true;
    var url = src || window.location.href;
    fetch(url, {
      credentials: "same-origin",
      headers: { "Accept": "text/html", "X-Jobqueue-Refresh": "1" }
    })
      .then(function (r) { return r.ok ? r.text() : null; })
      .then(function (html) {
        // Checked again: a box ticked while the page was read must stay ticked.
        if (html === null || holdReason() !== "") return;
        if (src) {
          live.innerHTML = html;
        } else {
          var doc = new DOMParser().parseFromString(html, "text/html");
          var fresh = doc.getElementById("live");
          if (!fresh) return;
          live.innerHTML = fresh.innerHTML;
        }
        refreshes++;
        lastRefresh = Date.now();
        live.setAttribute("data-refreshed", String(lastRefresh));
        live.setAttribute("data-refreshes", String(refreshes));
        setUpSelection(live);
      })
      .catch(function () {})
      .then(function () {
        busy = false;
        show();
      });
  }

  // One tick a second; a refresh once the interval has passed since the last one. An
  // interval that passes while the refresh is held counts as skipped.
  setInterval(function () {
    if (busy || interval === "off") {
      show();
      return;
    }
    if (Date.now() - lastTry < Number(interval) * 1000) {
      show();
      return;
    }
    lastTry = Date.now();
    if (holdReason() !== "") {
      skipped++;
      live.setAttribute("data-skipped", String(skipped));
      show();
      return;
    }
    refresh();
  }, 1000);

  button.addEventListener("click", function () {
    paused = !paused;
    store(KEY_PAUSED, paused ? "1" : null);
    lastTry = Date.now();
    show();
  });
  select.addEventListener("change", function () {
    interval = select.value;
    store(KEY_INTERVAL, interval);
    lastTry = 0;
    show();
  });
  document.addEventListener("change", show);
  document.addEventListener("focusin", show);
  document.addEventListener("focusout", show);
  show();
})();
