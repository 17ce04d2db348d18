// The console's only script of its own (no inline script anywhere: the CSP forbids it).
"use strict";

// A sign-in link from `herald dev` carries the token in the fragment (#token=…), which never
// reaches a server or a log: fill the form, forget the fragment, submit.
(function signInFromFragment() {
  var form = document.getElementById("sign-in");
  if (!form || !location.hash.startsWith("#token=")) return;
  var token = decodeURIComponent(location.hash.slice("#token=".length));
  history.replaceState(null, "", location.pathname);
  form.querySelector("textarea[name=token]").value = token;
  form.submit();
})();

// The outcomes chart: one small uPlot per channel, fed by the aggregate endpoint.
(function outcomeCharts() {
  var holder = document.getElementById("outcome-charts");
  if (!holder) return;
  function draw() {
    if (typeof uPlot === "undefined") return setTimeout(draw, 50);
    fetch(holder.dataset.source, { credentials: "same-origin" })
      .then(function (r) { return r.json(); })
      .then(function (data) {
        var width = Math.max(280, Math.min(holder.clientWidth || 600, 900));
        data.channels.forEach(function (ch) {
          var box = document.createElement("figure");
          var caption = document.createElement("figcaption");
          caption.textContent = ch.channel;
          box.appendChild(caption);
          box.setAttribute("role", "img");
          var total = ["delivered", "failed", "skipped", "in_flight"].map(function (k) {
            return k + " " + ch.counts[k].reduce(function (a, b) { return a + b; }, 0);
          }).join(", ");
          box.setAttribute("aria-label", ch.channel + " in the last 24 hours: " + total);
          holder.appendChild(box);
          new uPlot({
            width: width, height: 160,
            series: [
              {},
              { label: "delivered", stroke: "#1a7f37" },
              { label: "failed", stroke: "#cf222e" },
              { label: "skipped", stroke: "#9a6700" },
              { label: "in flight", stroke: "#0969da" },
            ],
          }, [data.hours, ch.counts.delivered, ch.counts.failed, ch.counts.skipped, ch.counts.in_flight], box);
        });
      });
  }
  draw();
})();

// The broadcast draft's audience picker: only the fields of the chosen kind are shown, and the
// count of people it reaches is asked for (debounced) whenever the audience changes. Without
// this script every field shows and the "Preview the audience" button asks the server instead.
(function audienceReach() {
  var form = document.getElementById("broadcast-draft");
  var out = document.getElementById("audience-reach");
  if (!form || !out) return;
  var kind = form.querySelector("select[name=audienceKind]");
  var timer = null;
  var asked = 0;

  function showFields() {
    form.querySelectorAll("[data-audience-for]").forEach(function (part) {
      part.hidden = part.dataset.audienceFor.split(" ").indexOf(kind.value) < 0;
    });
  }

  function say(text, state, count) {
    out.textContent = text;
    out.dataset.state = state;
    out.className = state === "error" ? "error" : "";
    if (count === undefined) delete out.dataset.count;
    else out.dataset.count = String(count);
  }

  function ask() {
    var mine = ++asked;
    out.dataset.state = "loading";
    fetch(out.dataset.source, {
      method: "POST",
      body: new URLSearchParams(new FormData(form)),
      credentials: "same-origin",
      headers: { Accept: "application/json" },
    })
      .then(function (r) { return r.json().then(function (data) { return { ok: r.ok, data: data }; }); })
      .then(function (answer) {
        if (mine !== asked) return; // a later change has asked again meanwhile
        if (answer.ok) {
          var n = answer.data.count;
          say("This reaches " + n + (n === 1 ? " person." : " people."), "ok", n);
        } else {
          var error = answer.data.error || {};
          say((error.code || "ERROR") + ": " + (error.message || "the audience was refused"), "error");
        }
      })
      .catch(function () {
        if (mine === asked) say("Could not count the audience.", "error");
      });
  }

  function changed(event) {
    var name = event.target && event.target.name;
    if (!name || name.indexOf("audience") !== 0) return;
    if (name === "audienceKind") showFields();
    clearTimeout(timer);
    timer = setTimeout(ask, 300);
  }

  form.addEventListener("input", changed);
  form.addEventListener("change", changed);
  showFields();
  ask();
})();
