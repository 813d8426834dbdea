// mocap4r2 web panel: systems, sessions and a live 3D view, drawn with a 2D canvas and a
// small perspective projection of our own (no library, no build step). Every text from the
// server is put in the page with textContent, never as HTML.
"use strict";

const TRACKED = "#43d675", UNTRACKED = "#ff4040", MARKER = "#e0e6ee", OCCLUDED = "#667";
const SEGMENT = "#5ab0ff", BACKGROUND = "#10161d", GRID = "#26313d";
const TRAIL_LENGTH = 120;
// the recorder's rules for a session id (recording/session_id.py), checked again by the server
function sessionProblem(id) {
  if (!id) return "the session id is empty";
  if (new TextEncoder().encode(id).length > 128) return "the session id is longer than 128 bytes";
  if (/[\x00-\x1f\x7f-\x9f]/.test(id)) return "the session id contains a control character";
  if (id.includes("/") || id.includes("\\")) return "the session id contains a path separator";
  if (id.includes("..")) return "the session id contains '..'";
  if (id.startsWith(".")) return "the session id starts with '.'";
  if (id !== id.trim()) return "the session id starts or ends with white space";
  return null;
}

const panel = { systems: [], framesDrawn: 0, framesReceived: 0, latencies: [], fps: 0, lastFrame: null,
                bodyColours: {} };
window.panel = panel;

// "1 system", "3 systems", "no systems yet"
function count(n, word, none) {
  if (!n) return none || "no " + word + "s yet";
  return n + " " + word + (n === 1 ? "" : "s");
}

// a table body's row saying it is empty, across every column
function emptyRow(body, text) {
  const columns = body.closest("table").querySelectorAll("thead th").length;
  const td = el("td", text, "empty"); td.colSpan = columns;
  const tr = el("tr", null, "empty-row"); tr.append(td);
  body.replaceChildren(tr);
}

function el(tag, text, cls) {
  const e = document.createElement(tag);
  if (text !== undefined && text !== null) e.textContent = String(text);
  if (cls) e.className = cls;
  return e;
}

async function api(path, body) {
  const options = body === undefined ? {} : {
    method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body) };
  const response = await fetch(path, options);
  const data = await response.json().catch(() => ({ error: response.statusText }));
  if (!response.ok) throw new Error(data.error || response.statusText);
  return data;
}

// ------------------------------------------------------------------ systems
const ticked = new Set();
const TRANSITION_HINT = {
  configure: "configure: from unconfigured only", activate: "activate: from inactive only",
  deactivate: "deactivate: from active only" };
function renderSystems(rows) {
  const body = document.querySelector("#systems tbody");
  body.replaceChildren();
  if (!rows.length) emptyRow(body, "none yet: systems appear here when they announce themselves");
  for (const s of rows) {
    const tone = (s.status && s.status.tone) || "waiting";
    const tr = el("tr", null, "tone-row-" + tone);
    tr.dataset.system = s.system;
    const box = el("input"); box.type = "checkbox"; box.checked = ticked.has(s.system);
    box.addEventListener("change", () => box.checked ? ticked.add(s.system) : ticked.delete(s.system));
    const td0 = el("td"); td0.append(box); tr.append(td0);
    const ratios = Object.entries(s.tracking || {}).map(([k, v]) => k + " " + Math.round(100 * v) + "%");
    for (const [value, cls] of [[s.system], [s.type], [s.state, "state"], [s.rate], [s.measured_rate || "-"],
        [s.latency_ms || "-"], [s.dropped || "-", "dropped"], [ratios.join(", ") || "-"],
        [s.session || "-", "session"]]) {
      tr.append(el("td", value, cls));
    }
    // the colour follows the state: only an active, healthy system is a green OK
    const text = (s.status && s.status.text) || "-";
    const colon = text.indexOf(": ");
    const status = el("td", null, "status");
    status.dataset.tone = tone;
    status.append(el("span", colon > 0 ? text.slice(0, colon) : text, "pill tone-" + tone));
    if (colon > 0) status.append(el("span", text.slice(colon + 2), "detail"));
    tr.append(status);
    const actions = el("td", null, "lifecycle");
    if (s.type !== "recorder") {
      const valid = s.transitions || [];
      for (const t of ["configure", "activate", "deactivate"]) {
        const b = el("button", t); b.type = "button"; b.dataset.transition = t;
        b.disabled = !valid.includes(t);
        b.title = b.disabled ? "not now: " + s.state + " (" + TRANSITION_HINT[t] + ")" : t + " " + s.system;
        b.addEventListener("click", () => transition(s.system, t));
        actions.append(b);
      }
    }
    tr.append(actions);
    body.append(tr);
  }
  renderPlots(rows);
  const select = document.getElementById("live-system");
  const liveRows = rows.filter(s => s.live);
  const live = liveRows.map(s => s.system);
  const current = select.value;
  const rebuilt = live.join() !== [...select.options].map(o => o.value).join();
  if (rebuilt) select.replaceChildren(...live.map(n => { const o = el("option", n); o.value = n; return o; }));
  // the system the user picked while it is listed; until then the first active one (an
  // inactive system sends no frames, and the list's order is the order of discovery)
  let wanted = current;
  if (!(liveChosen && live.includes(current))) {
    const active = liveRows.find(s => s.state === "active");
    wanted = active ? active.system : (live.includes(current) ? current : (live[0] || ""));
  }
  if (rebuilt || wanted !== current) {
    select.value = wanted;
    chooseSystem();
  }
}

// ------------------------------------------------------------------ last minute
const PLOTS = [["rate", "rate (Hz)", "#1f6fb2"], ["latency", "latency (ms)", "#b26a00"],
               ["tracking", "tracking (%)", "#2e7d32"]];
function renderPlots(rows) {
  const box = document.getElementById("plots");
  const shown = rows.filter(s => s.type !== "recorder");
  if (!shown.length) { box.replaceChildren(el("p", "none yet", "empty")); return; }
  const cards = [];
  for (const s of shown) {
    const card = el("div", null, "plot-card"); card.dataset.system = s.system;
    card.append(el("h3", s.system + " (" + s.state + ")"));
    const h = s.history || { age: [] };
    for (const [key, label, colour] of PLOTS) {
      const values = h[key] || [];
      const last = [...values].reverse().find(v => v !== null && v !== undefined);
      const row = el("div", null, "plot");
      row.append(el("span", label + ": " + (last === undefined ? "-" : (+last).toFixed(1))));
      const c = el("canvas", null, "plot-" + key); c.width = 200; c.height = 44;
      c.dataset.points = String(values.filter(v => v !== null).length);
      drawPlot(c, h.age || [], values, colour);
      row.append(c);
      card.append(row);
    }
    cards.push(card);
  }
  box.replaceChildren(...cards);
}

// one series over the last 60 s (x: seconds before now, right is now), its min and max marked
function drawPlot(canvas, ages, values, colour) {
  const ctx = canvas.getContext("2d"), w = canvas.width, h = canvas.height;
  ctx.clearRect(0, 0, w, h);
  const points = ages.map((a, i) => [a, values[i]]).filter(p => p[1] !== null && Number.isFinite(p[1]));
  ctx.fillStyle = "#888"; ctx.font = "9px sans-serif";
  if (!points.length) { ctx.fillText("no data yet", 4, h / 2 + 3); return; }
  let lo = Math.min(...points.map(p => p[1])), hi = Math.max(...points.map(p => p[1]));
  if (hi - lo < 1e-9) { lo -= 1; hi += 1; }
  const x = a => w - 1 - (w - 40) * Math.min(a, 60) / 60, y = v => h - 4 - (h - 8) * (v - lo) / (hi - lo);
  ctx.fillText(hi.toFixed(hi < 10 ? 1 : 0), 2, 9); ctx.fillText(lo.toFixed(lo < 10 ? 1 : 0), 2, h - 2);
  ctx.fillText("-60 s", 2, h / 2 + 3);
  ctx.strokeStyle = colour; ctx.lineWidth = 1.5; ctx.beginPath();
  points.forEach(([a, v], i) => (i ? ctx.lineTo(x(a), y(v)) : ctx.moveTo(x(a), y(v))));
  ctx.stroke();
  if (points.length === 1) { ctx.fillStyle = colour; ctx.fillRect(x(points[0][0]) - 2, y(points[0][1]) - 2, 4, 4); }
}

async function transition(system, t) {
  try {
    const r = await api("/api/lifecycle", { system, transition: t });
    note((r.success ? "ok " : "FAILED ") + t + " " + system + (r.message ? ": " + r.message : ""), r.success);
  } catch (e) { note(t + " " + system + ": " + e.message, false); }
}

async function pollSystems() {
  try {
    panel.systems = await api("/api/systems");
    renderSystems(panel.systems);
    document.getElementById("status").textContent = count(panel.systems.length, "system");
  } catch (e) { document.getElementById("status").textContent = "panel unreachable: " + e.message; }
}

// ------------------------------------------------------------------ session
function note(text, ok) {
  const li = el("li", new Date().toLocaleTimeString() + " " + text, ok ? "ack-ok" : "ack-fail");
  const list = document.getElementById("acks");
  list.prepend(li);
  while (list.children.length > 50) list.lastChild.remove();
}

async function control(start) {
  const id = document.getElementById("session-id").value;
  const problem = start ? sessionProblem(id) : (id ? sessionProblem(id) : null);
  document.getElementById("session-problem").textContent = problem || "";
  if (problem) return;
  const verb = start ? "START" : "STOP";
  try {
    const r = await api(start ? "/api/start" : "/api/stop", { session_id: id, systems: [...ticked] });
    for (const a of r.acks) {
      note(verb + " " + a.system + ": " + (a.success ? "ok" : "FAILED") + (a.message ? " — " + a.message : "")
           + (a.recorder ? " [recorder]" : ""), a.success);
    }
    for (const m of r.missing) note(verb + " " + m + ": no answer", false);
    if (!r.acks.length && !r.missing.length) note(verb + ": no system answered", false);
  } catch (e) { note(verb + ": " + e.message, false); }
  pollSystems(); pollSessions();
}

async function pollSessions() {
  let rows = [];
  try { rows = await api("/api/sessions"); } catch (e) { return; }
  const body = document.querySelector("#sessions tbody");
  body.replaceChildren();
  if (!rows.length) emptyRow(body, "none yet: START a session to record one");
  for (const s of rows.slice().reverse()) {
    const tr = el("tr");
    const start = s.start_ns ? new Date(s.start_ns / 1e6).toLocaleString() : "-";
    for (const v of [s.session, start, s.duration.toFixed(1), s.systems.join(", "), s.messages, s.state]) tr.append(el("td", v));
    const links = el("td");
    for (const fmt of ["c3d", "trc", "csv"]) {
      for (const system of (s.systems.length ? s.systems : [""])) {
        const a = el("a", fmt.toUpperCase() + (s.systems.length > 1 ? " " + system : ""));
        const q = new URLSearchParams({ session: s.session, format: fmt });
        if (system) q.set("system", system);
        a.href = "/api/export?" + q; a.className = "export-" + fmt;
        links.append(a, " ");
      }
    }
    tr.append(links);
    body.append(tr);
  }
}

// ------------------------------------------------------------------ live view
const view = { yaw: -0.6, pitch: 0.55, distance: 9, target: [0, 0, 0.8] };
const trails = new Map();
let frame = null, socket = null;
let liveChosen = false;  // the user picked the live system: the page no longer follows the active one

function chooseSystem() {
  trails.clear(); frame = null;
  const system = document.getElementById("live-system").value;
  if (socket && socket.readyState === WebSocket.OPEN && system) socket.send(JSON.stringify({ system, rate: 30 }));
}

function connect() {
  socket = new WebSocket((location.protocol === "https:" ? "wss://" : "ws://") + location.host + "/ws");
  socket.onopen = chooseSystem;
  socket.onmessage = (event) => {
    const data = JSON.parse(event.data);
    if (data.type !== "frame" || data.system !== document.getElementById("live-system").value) return;
    frame = data; panel.framesReceived++; panel.lastFrame = data;
    panel.latencies.push(Date.now() / 1000 - data.stamp);
    if (panel.latencies.length > 1000) panel.latencies.shift();
    for (const b of data.bodies) {
      if (!b.p.every(Number.isFinite)) continue;
      const trail = trails.get(b.name) || [];
      trail.push(b.p); if (trail.length > TRAIL_LENGTH) trail.shift();
      trails.set(b.name, trail);
    }
  };
  socket.onclose = () => setTimeout(connect, 1000);
}

function project(p, canvas) {
  // orbit camera around view.target: yaw about z, pitch above the xy plane
  const x = p[0] - view.target[0], y = p[1] - view.target[1], z = p[2] - view.target[2];
  const cy = Math.cos(view.yaw), sy = Math.sin(view.yaw), cp = Math.cos(view.pitch), sp = Math.sin(view.pitch);
  // the camera sits behind (-y of its heading) and above, looking along (0, cp, -sp): right
  // is +x and up (0, sp, cp), so the top view shows x to the right and y up (right-handed)
  const xr = cy * x + sy * y, yr = -sy * x + cy * y;
  const depth = view.distance + cp * yr - sp * z;
  const up = sp * yr + cp * z;
  if (depth < 0.05) return null;
  const f = canvas.height * 1.2;
  return [canvas.width / 2 + f * xr / depth, canvas.height / 2 - f * up / depth, depth];
}

function rotate(q, v) {
  const [x, y, z, w] = q, [vx, vy, vz] = v;
  const tx = 2 * (y * vz - z * vy), ty = 2 * (z * vx - x * vz), tz = 2 * (x * vy - y * vx);
  return [vx + w * tx + (y * tz - z * ty), vy + w * ty + (z * tx - x * tz), vz + w * tz + (x * ty - y * tx)];
}

function line(ctx, a, b, colour, width) {
  if (!a || !b) return;
  ctx.strokeStyle = colour; ctx.lineWidth = width || 1;
  ctx.beginPath(); ctx.moveTo(a[0], a[1]); ctx.lineTo(b[0], b[1]); ctx.stroke();
}

// body names placed so that none overlaps another: each tries spots around its body,
// nearest first, then further out (with a leader line to its body); the boxes placed are
// kept in panel.labelBoxes (the tests check them)
const LABEL_SPOTS = [[8, -8], [8, 16], [-8, -8], [-8, 16], [0, -14], [0, 26]];
function placeLabels(ctx, labels, canvas) {
  ctx.font = "12px sans-serif";
  const placed = [];
  const free = b => b.x >= 0 && b.y >= 0 && b.x + b.w <= canvas.width && b.y + b.h <= canvas.height &&
    placed.every(o => b.x + b.w + 2 <= o.x || o.x + o.w + 2 <= b.x || b.y + b.h + 1 <= o.y || o.y + o.h + 1 <= b.y);
  for (const label of labels.sort((a, b) => a.y - b.y || a.x - b.x)) {
    const w = ctx.measureText(label.text).width, h = 13;
    let chosen = null;
    for (let ring = 0; ring < 12 && !chosen; ring++) {
      for (const [dx, dy] of LABEL_SPOTS) {
        const sx = dx < 0 ? dx - w : (dx === 0 ? -w / 2 : dx), sy = dy + (dy < 0 ? -1 : 1) * ring * h;
        const box = { x: label.x + sx, y: label.y + sy - h + 3, w, h, text: label.text, ring, ax: label.x, ay: label.y };
        if (free(box)) { chosen = box; break; }
      }
    }
    if (!chosen) continue;  // no room anywhere near: the legend below the view still names it
    placed.push(chosen);
    if (chosen.ring > 0) line(ctx, [label.x, label.y], [chosen.x + (chosen.x < label.x ? chosen.w : 0),
      chosen.y + chosen.h / 2], label.colour, 1);
    ctx.fillStyle = label.colour; ctx.fillText(label.text, chosen.x, chosen.y + h - 3);
  }
  panel.labelBoxes = placed;
}

let frameTimes = [];
function draw(now) {
  const canvas = document.getElementById("view"), ctx = canvas.getContext("2d");
  ctx.fillStyle = BACKGROUND; ctx.fillRect(0, 0, canvas.width, canvas.height);
  for (let i = -3; i <= 3; i++) {                                // the floor, 1 m grid
    line(ctx, project([i, -3, 0], canvas), project([i, 3, 0], canvas), GRID);
    line(ctx, project([-3, i, 0], canvas), project([3, i, 0], canvas), GRID);
  }
  const o = project([0, 0, 0], canvas);
  line(ctx, o, project([0.5, 0, 0], canvas), "#f55", 2);
  line(ctx, o, project([0, 0.5, 0], canvas), "#5f5", 2);
  line(ctx, o, project([0, 0, 0.5], canvas), "#59f", 2);
  const legend = document.getElementById("bodies");
  if (frame) {
    frame.markers.forEach((m, i) => {
      if (!m.every(Number.isFinite)) return;
      const p = project(m, canvas); if (!p) return;
      ctx.fillStyle = frame.occluded[i] ? OCCLUDED : MARKER;
      ctx.fillRect(p[0] - 2, p[1] - 2, 4, 4);
    });
    const byId = new Map(frame.segments.map(s => [s.skeleton + "/" + s.id, s]));
    for (const s of frame.segments) {
      const parent = byId.get(s.skeleton + "/" + s.parent);
      if (parent) line(ctx, project(s.p, canvas), project(parent.p, canvas), s.tracked ? SEGMENT : UNTRACKED, 2);
    }
    if (document.getElementById("trails").checked) {
      for (const [name, trail] of trails) {
        const b = frame.bodies.find(x => x.name === name);
        ctx.globalAlpha = 0.5;
        for (let i = 1; i < trail.length; i++) {
          line(ctx, project(trail[i - 1], canvas), project(trail[i], canvas), b && !b.tracked ? UNTRACKED : TRACKED);
        }
        ctx.globalAlpha = 1;
      }
    }
    const items = [], labels = [];
    for (const b of frame.bodies) {
      const colour = b.tracked ? TRACKED : UNTRACKED;
      panel.bodyColours[b.name] = colour;
      const c = project(b.p, canvas);
      if (c) {
        ctx.fillStyle = colour; ctx.beginPath(); ctx.arc(c[0], c[1], 6, 0, 2 * Math.PI); ctx.fill();
        [[1, 0, 0], [0, 1, 0], [0, 0, 1]].forEach((axis, k) => {
          const r = rotate(b.q, axis).map((v, j) => b.p[j] + 0.25 * v);
          line(ctx, c, project(r, canvas), b.tracked ? ["#f55", "#5f5", "#59f"][k] : UNTRACKED, 2);
        });
        labels.push({ x: c[0], y: c[1], text: b.name, colour });
      }
      const li = el("li", b.name + (b.tracked ? " tracked" : " NOT tracked"), b.tracked ? "tracked" : "untracked");
      li.dataset.body = b.name;
      items.push(li);
    }
    placeLabels(ctx, labels, canvas);
    if (!items.length) items.push(el("li", "no bodies in this frame", "empty"));
    legend.replaceChildren(...items);
  } else {
    panel.labelBoxes = [];
    const system = document.getElementById("live-system").value;
    const text = system ? "no frame yet from " + system : "none yet: no system streams frames";
    if (legend.textContent !== text) legend.replaceChildren(el("li", text, "empty"));
  }
  panel.framesDrawn++;
  frameTimes.push(now); while (frameTimes.length && now - frameTimes[0] > 1000) frameTimes.shift();
  panel.fps = frameTimes.length;
  document.getElementById("fps").textContent = panel.fps + " fps" + (frame ? ", frame " + frame.frame : "");
  requestAnimationFrame(draw);
}

function setupControls() {
  const canvas = document.getElementById("view");
  let drag = null;
  canvas.addEventListener("pointerdown", e => { drag = [e.clientX, e.clientY]; canvas.setPointerCapture(e.pointerId); });
  canvas.addEventListener("pointerup", () => { drag = null; });
  canvas.addEventListener("pointermove", e => {
    if (!drag) return;
    view.yaw -= (e.clientX - drag[0]) * 0.01;
    view.pitch = Math.max(-1.5, Math.min(1.5707, view.pitch + (e.clientY - drag[1]) * 0.01));
    drag = [e.clientX, e.clientY];
  });
  canvas.addEventListener("wheel", e => {
    e.preventDefault();
    view.distance = Math.max(1, Math.min(60, view.distance * Math.exp(e.deltaY * 0.001)));
  }, { passive: false });
  document.getElementById("top-view").addEventListener("click", () => { view.pitch = 1.5707; view.yaw = 0; });
  document.getElementById("reset-view").addEventListener("click", () => Object.assign(view, { yaw: -0.6, pitch: 0.55, distance: 9 }));
  document.getElementById("live-system").addEventListener("change", () => { liveChosen = true; chooseSystem(); });
  document.getElementById("start").addEventListener("click", () => control(true));
  document.getElementById("stop").addEventListener("click", () => control(false));
  document.getElementById("session-id").addEventListener("input", e => {
    document.getElementById("session-problem").textContent = sessionProblem(e.target.value) || "";
  });
}

setupControls();
pollSystems(); pollSessions();
setInterval(pollSystems, 1000);
setInterval(pollSessions, 5000);
connect();
requestAnimationFrame(draw);
