// Headwater console: the live throughput chart (our own, no library).
// Polls the JSON counters (messages in/out since the server started) every second,
// turns two readings into a rate, and draws the last 120 rates as two SVG polylines.
"use strict";

(function () {
  const svg = document.getElementById("throughput");
  if (!svg) return;
  const NS = "http://www.w3.org/2000/svg";
  const W = 600, H = 160, KEEP = 120;
  const lines = { in: document.createElementNS(NS, "polyline"), out: document.createElementNS(NS, "polyline") };
  for (const [name, el] of Object.entries(lines)) { el.setAttribute("class", name); svg.appendChild(el); }
  const scale = document.getElementById("throughput-scale");
  const now = document.getElementById("throughput-now");
  const rates = { in: [], out: [] };
  let last = null;

  function draw() {
    const top = Math.max(1, ...rates.in, ...rates.out);
    scale.textContent = "scale: " + Math.round(top) + " msg/s";
    for (const name of ["in", "out"]) {
      const points = rates[name].map((r, i) => {
        const x = (W * (i + KEEP - rates[name].length)) / (KEEP - 1);
        return x.toFixed(1) + "," + (H - 2 - (H - 8) * (r / top)).toFixed(1);
      });
      lines[name].setAttribute("points", points.join(" "));
    }
  }

  async function poll() {
    try {
      const response = await fetch(svg.dataset.source, { credentials: "same-origin" });
      if (!response.ok) return;
      const c = await response.json();
      if (last !== null && c.time_s > last.time_s) {
        const dt = c.time_s - last.time_s;
        for (const name of ["in", "out"]) {
          rates[name].push(Math.max(0, (c["messages_" + name] - last["messages_" + name]) / dt));
          if (rates[name].length > KEEP) rates[name].shift();
        }
        now.textContent = "now: " + Math.round(rates.in.at(-1)) + " in, " + Math.round(rates.out.at(-1)) + " out";
        draw();
      }
      last = c;
    } catch (e) {
      // the server is restarting or gone: keep the chart, try again next tick
    }
  }

  poll();
  setInterval(poll, 1000);
})();
