// ledgerwire console: live charts and auto-refresh.  No framework, no build step, no CDN;
// everything here is same-origin fetches of JSON the console itself serves.
"use strict";

function drawChart(canvas, series, colors, unit) {
  const ctx = canvas.getContext("2d");
  const w = canvas.width, h = canvas.height, pad = 34;
  ctx.clearRect(0, 0, w, h);
  let max = 1;
  for (const s of series) for (const v of s.points) if (v > max) max = v;
  ctx.strokeStyle = "#dde1e8"; ctx.fillStyle = "#6b7385"; ctx.font = "11px sans-serif";
  for (let i = 0; i <= 4; i++) {
    const y = h - pad / 2 - (h - pad) * i / 4;
    ctx.beginPath(); ctx.moveTo(pad, y); ctx.lineTo(w - 4, y); ctx.stroke();
    const label = max * i / 4;
    ctx.fillText(label >= 100 ? label.toFixed(0) : label.toFixed(label >= 10 ? 1 : 2), 2, y + 4);
  }
  series.forEach((s, k) => {
    ctx.strokeStyle = colors[k]; ctx.lineWidth = 2; ctx.beginPath();
    const n = s.points.length;
    s.points.forEach((v, i) => {
      const x = pad + (w - pad - 4) * (n <= 1 ? 1 : i / (n - 1));
      const y = h - pad / 2 - (h - pad) * v / max;
      if (i === 0) ctx.moveTo(x, y); else ctx.lineTo(x, y);
    });
    ctx.stroke();
    ctx.fillStyle = colors[k];
    const last = n ? s.points[n - 1] : 0;
    ctx.fillText(s.name + " " + last.toFixed(last >= 100 ? 0 : 2) + " " + unit, pad + 6 + k * 170, 12);
  });
}

function startOverviewCharts() {
  const rates = document.getElementById("chart-rates");
  const latency = document.getElementById("chart-latency");
  if (!rates || !latency) return;
  const keep = 60;
  const hist = { produce: [], fetch: [], Produce: [], Fetch: [] };
  let prev = null, prevAt = 0;
  async function tick() {
    try {
      const r = await fetch("/console/data/traffic", { credentials: "same-origin" });
      if (!r.ok) return;
      const now = await r.json(), at = performance.now() / 1000;
      if (prev) {
        const dt = Math.max(at - prevAt, 0.001);
        hist.produce.push((now.produce_messages - prev.produce_messages) / dt);
        hist.fetch.push((now.fetch_messages - prev.fetch_messages) / dt);
        for (const api of ["Produce", "Fetch"]) {
          const a = now.latency[api] || { count: 0, sum: 0 }, b = prev.latency[api] || { count: 0, sum: 0 };
          const n = a.count - b.count;
          hist[api].push(n > 0 ? 1000 * (a.sum - b.sum) / n : 0);
        }
        for (const k in hist) if (hist[k].length > keep) hist[k].shift();
      }
      prev = now; prevAt = at;
      drawChart(rates, [{ name: "produce", points: hist.produce }, { name: "fetch", points: hist.fetch }],
                ["#2f5fd0", "#2e9d5b"], "msg/s");
      drawChart(latency, [{ name: "Produce", points: hist.Produce }, { name: "Fetch", points: hist.Fetch }],
                ["#2f5fd0", "#2e9d5b"], "ms");
    } catch (e) { /* the broker may be restarting; try again next tick */ }
  }
  tick();
  setInterval(tick, 2000);
}

function startLagRefresh() {
  const chart = document.getElementById("lag-chart");
  if (!chart) return;
  async function tick() {
    try {
      const r = await fetch(chart.dataset.source, { credentials: "same-origin" });
      if (!r.ok) return;
      const group = await r.json();
      let max = 1;
      for (const p of group.partitions) if ((p.lag || 0) > max) max = p.lag;
      for (const p of group.partitions) {
        const row = chart.querySelector(`.lag-row[data-topic="${CSS.escape(p.topic)}"][data-partition="${p.partition}"]`);
        if (!row) continue;
        row.querySelector(".lag-bar span").style.width = (100 * (p.lag || 0) / max).toFixed(1) + "%";
        row.querySelector(".lag-value").textContent = p.lag === null ? "–" : String(p.lag);
      }
      const show = (v) => (v === null || v === undefined ? "–" : String(v));
      for (const p of group.partitions) {
        const tr = document.querySelector(`tr.lag-table-row[data-topic="${CSS.escape(p.topic)}"][data-partition="${p.partition}"]`);
        if (!tr) continue;
        tr.querySelector(".committed-cell").textContent = show(p.committed_offset);
        tr.querySelector(".end-cell").textContent = show(p.log_end_offset);
        tr.querySelector(".lag-cell").textContent = show(p.lag);
      }
      const total = document.getElementById("total-lag");
      if (total) total.textContent = String(group.total_lag);
      const state = document.getElementById("group-state");
      if (state) state.textContent = group.state;
    } catch (e) { /* try again next tick */ }
  }
  tick();
  setInterval(tick, 2000);
}

document.addEventListener("DOMContentLoaded", () => {
  startOverviewCharts();
  startLagRefresh();
});
