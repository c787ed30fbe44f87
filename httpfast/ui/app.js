// latchd dashboard: polls GET /v1/ui/keys (and GET /v1/locks/{key} for
// the selected key) with the API's bearer token, kept in sessionStorage.
"use strict";
(function () {
  const TOKEN = "latchd.token";
  const $ = (id) => document.getElementById(id);
  const history = []; // {t, grants, releases, timeouts} per poll, for rates
  const HISTORY = 120;
  let timer = null;
  let selected = null; // {key, kind}
  let busy = false;

  function headers() {
    const t = sessionStorage.getItem(TOKEN);
    return t ? { Authorization: "Bearer " + t } : {};
  }

  async function get(path) {
    const r = await fetch(path, { headers: headers(), cache: "no-store" });
    if (r.status === 401) {
      const e = new Error("unauthorized");
      e.auth = true;
      throw e;
    }
    const body = await r.json().catch(() => ({}));
    if (!r.ok) throw new Error(body.message || r.status + " " + r.statusText);
    return body;
  }

  function text(el, s) { el.textContent = s; }
  function fmt(n) { return n >= 1e6 ? (n / 1e6).toFixed(1) + "M" : n >= 1e4 ? (n / 1e3).toFixed(1) + "k" : String(n); }
  function secs(s) { return s < 0 ? "–" : s >= 3600 ? (s / 3600).toFixed(1) + "h" : s >= 60 ? (s / 60).toFixed(1) + "m" : s.toFixed(1) + "s"; }
  function cell(tr, s, cls) { const td = document.createElement("td"); td.textContent = s; if (cls) td.className = cls; tr.appendChild(td); return td; }

  function setStatus(s, cls) { const el = $("status"); text(el, s); el.className = "pill " + (cls || ""); }

  function showAuth(msg) {
    $("auth").hidden = false;
    $("main").hidden = true;
    text($("autherr"), msg || "");
    setStatus("token needed", "warn");
    $("token").focus();
  }

  function rate(field) {
    if (history.length < 2) return null;
    const a = history[history.length - 2], b = history[history.length - 1];
    const dt = (b.t - a.t) / 1000;
    return dt > 0 ? Math.max(0, (b[field] - a[field]) / dt) : null;
  }

  function drawChart() {
    const c = $("chart");
    const w = c.clientWidth || c.width, h = c.height;
    if (c.width !== w) c.width = w;
    const g = c.getContext("2d");
    g.clearRect(0, 0, w, h);
    const series = { grants: "#2f6fde", releases: "#1f9d55", timeouts: "#d64545" };
    const pts = {};
    let top = 1;
    for (const f in series) {
      pts[f] = [];
      for (let i = 1; i < history.length; i++) {
        const dt = (history[i].t - history[i - 1].t) / 1000;
        const v = dt > 0 ? Math.max(0, (history[i][f] - history[i - 1][f]) / dt) : 0;
        pts[f].push(v);
        top = Math.max(top, v);
      }
    }
    g.strokeStyle = "#e2e5eb";
    g.beginPath(); g.moveTo(0, h - 0.5); g.lineTo(w, h - 0.5); g.stroke();
    g.fillStyle = "#6b7385"; g.font = "11px sans-serif";
    g.fillText(fmt(Math.round(top)) + "/s", 4, 12);
    for (const f in series) {
      const p = pts[f];
      if (!p.length) continue;
      g.strokeStyle = series[f]; g.lineWidth = 2; g.beginPath();
      const step = w / (HISTORY - 1);
      const x0 = w - (p.length - 1) * step;
      p.forEach((v, i) => { const x = x0 + i * step, y = h - 4 - (v / top) * (h - 20); i ? g.lineTo(x, y) : g.moveTo(x, y); });
      g.stroke();
    }
  }

  function renderCluster(c) {
    const el = $("cluster");
    if (!c) { el.hidden = true; return; }
    el.hidden = false;
    el.replaceChildren();
    const add = (label, v) => { el.append(label + " "); const b = document.createElement("b"); b.textContent = v; el.append(b, "  "); };
    add("node", c.node_id);
    add("role", c.role);
    add("term", String(c.term));
    add("leader", c.leader_id ? c.leader_id + (c.leader_http_addr ? " (" + c.leader_http_addr + ")" : "") : "none");
  }

  function renderKeys(data) {
    const tb = $("keys").tBodies[0];
    const rows = [];
    for (const k of data.keys) {
      const tr = document.createElement("tr");
      tr.dataset.key = k.key;
      if (k.waiters > 0) tr.className = "waiting";
      const kc = cell(tr, k.key, "key");
      kc.title = "show holders and waiters";
      kc.addEventListener("click", () => { selected = { key: k.key, kind: k.kind }; poll(); });
      cell(tr, k.kind === "lock" ? "lock" : k.kind === "rwlock" ? "rwlock/" + (k.mode || "free") : "semaphore/" + k.limit);
      cell(tr, k.owner || "–", "mono holder");
      cell(tr, k.fence || "–", "mono");
      cell(tr, k.holders ? secs(k.lease_expires_in_s) : "–");
      cell(tr, String(k.holders));
      cell(tr, String(k.waiters), "w");
      rows.push(tr);
    }
    tb.replaceChildren(...rows);
    text($("matched"), data.matched + (data.matched === 1 ? " key matches" : " keys match") +
      (data.matched > data.keys.length ? ", showing the busiest " + data.keys.length : ""));
  }

  async function renderDetail() {
    const d = $("detail");
    if (!selected) { d.hidden = true; return; }
    const route = { lock: "/v1/locks/", rwlock: "/v1/rwlocks/" }[selected.kind] || "/v1/semaphores/";
    const st = await get(route + encodeURIComponent(selected.key));
    d.hidden = false;
    text($("d-title"), st.key + "  (" + st.kind + ", limit " + st.limit + (st.exists ? "" : ", not in memory") + ")");
    $("d-holders").replaceChildren(...st.holders.map((h) => {
      const tr = document.createElement("tr");
      cell(tr, h.owner + (h.mode ? " (" + h.mode + ")" : ""), "mono"); cell(tr, h.fence, "mono"); cell(tr, secs(h.lease_expires_in_s));
      return tr;
    }));
    $("d-waiters").replaceChildren(...st.waiters.map((w, i) => {
      const tr = document.createElement("tr");
      cell(tr, String(i + 1)); cell(tr, w.owner + (w.mode ? " (" + w.mode + ")" : ""), "mono");
      cell(tr, w.wait_expires_in_s === undefined ? "no deadline" : secs(w.wait_expires_in_s));
      return tr;
    }));
  }

  async function poll() {
    if (busy) return;
    busy = true;
    try {
      const q = encodeURIComponent($("q").value);
      const data = await get("/v1/ui/keys?limit=" + $("limit").value + "&q=" + q);
      $("auth").hidden = true;
      $("main").hidden = false;
      $("logout").hidden = !sessionStorage.getItem(TOKEN);
      const t = data.totals;
      history.push({ t: Date.now(), grants: t.grants_total, releases: t.releases_total, timeouts: t.timeouts_total, expiries: t.expiries_total });
      if (history.length > HISTORY) history.shift();
      text($("t-connections"), fmt(t.connections));
      text($("t-keys"), fmt(t.keys));
      text($("t-held"), fmt(t.held));
      text($("t-waiting"), fmt(t.waiting));
      text($("t-delayed"), fmt(t.delayed));
      for (const f of ["grants", "releases", "timeouts", "expiries"]) {
        const r = rate(f);
        text($("r-" + f), r === null ? "–" : r.toFixed(r < 10 ? 1 : 0));
      }
      text($("t-fence"), t.last_fence);
      renderCluster(data.cluster);
      renderKeys(data);
      drawChart();
      await renderDetail();
      text($("updated"), new Date().toLocaleTimeString());
      if (data.cluster && data.cluster.role !== "leader") setStatus(data.cluster.role, "warn");
      else setStatus("live", "ok");
    } catch (e) {
      if (e.auth) showAuth(sessionStorage.getItem(TOKEN) ? "wrong token" : "");
      else setStatus("error: " + e.message, "bad");
    } finally {
      busy = false;
    }
  }

  function schedule() {
    clearInterval(timer);
    const ms = Number($("interval").value);
    if (ms > 0) timer = setInterval(poll, ms);
  }

  document.addEventListener("DOMContentLoaded", () => {
    $("auth").addEventListener("submit", (ev) => {
      ev.preventDefault();
      sessionStorage.setItem(TOKEN, $("token").value.trim());
      $("token").value = "";
      poll();
    });
    $("logout").addEventListener("click", () => { sessionStorage.removeItem(TOKEN); showAuth(""); });
    $("interval").addEventListener("change", schedule);
    $("limit").addEventListener("change", poll);
    let debounce = null;
    $("q").addEventListener("input", () => { clearTimeout(debounce); debounce = setTimeout(poll, 200); });
    poll();
    schedule();
  });
})();
