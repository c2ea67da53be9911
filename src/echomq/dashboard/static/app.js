// echomq dashboard: one websocket, one snapshot a second, live events in between.
// Everything from the server is shown with textContent (never innerHTML): job data is
// untrusted. The operator token comes from the URL fragment (#token=...) or the form,
// and lives in sessionStorage only.
"use strict";

(() => {
  const $ = (id) => document.getElementById(id);
  const STATES = ["pending", "active", "scheduled", "dead", "completed", "cancelled"];
  const CONFIRM = new Set(["drain", "remove"]);

  const app = {
    ws: null,
    backoff: 250,
    snapshot: null,
    receivedAt: 0, // performance.now() when the snapshot arrived
    selected: null,
    token: "",
    authed: false,
    ref: 0,
    pending: new Map(), // ref -> {action, queue, job}
    openLogs: new Set(), // dead job ids whose logs are open
    armed: new Map(), // "action:queue:job" -> expiry (two-step confirm)
    feed: [],
    leaseSpan: new Map(), // job id -> longest lease time left seen (ms)
    archive: null, // the archive the history panel reads (null: no panel)
    history: { queue: null, state: "", cursors: [], page: null, ref: 0, loadedAt: 0 },
    flow: { queue: null, job: null, ref: 0, loadedAt: 0, value: null }, // the flow panel
  };

  // -- small helpers -------------------------------------------------------------------

  function h(tag, props, ...children) {
    const el = document.createElement(tag);
    for (const [k, v] of Object.entries(props || {})) {
      if (v === undefined || v === null || v === false) continue;
      if (k === "class") el.className = v;
      else if (k === "text") el.textContent = v;
      else if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
      else if (k === "dataset") Object.assign(el.dataset, v);
      else el.setAttribute(k, v === true ? "" : v);
    }
    for (const c of children.flat()) {
      if (c === null || c === undefined || c === false) continue;
      el.append(c instanceof Node ? c : document.createTextNode(String(c)));
    }
    return el;
  }

  const shortId = (id) => (id.length > 14 ? id.slice(0, 12) + "…" : id);

  function serverNow() {
    if (!app.snapshot) return Date.now();
    return app.snapshot.now_ms + (performance.now() - app.receivedAt);
  }

  function ago(ms) {
    const s = Math.max(0, (serverNow() - ms) / 1000);
    if (s < 60) return `${Math.round(s)} s ago`;
    if (s < 3600) return `${Math.round(s / 60)} min ago`;
    if (s < 86400) return `${Math.round(s / 3600)} h ago`;
    return `${Math.round(s / 86400)} d ago`;
  }

  const fmt = (n) => (n >= 100 ? Math.round(n).toLocaleString() : (Math.round(n * 10) / 10).toString());

  function toast(text, bad) {
    const el = h("div", { class: bad ? "toast bad" : "toast", role: "status", text });
    $("toasts").append(el);
    setTimeout(() => el.remove(), bad ? 6000 : 3000);
  }

  // -- the websocket ---------------------------------------------------------------------

  function connect() {
    const scheme = location.protocol === "https:" ? "wss" : "ws";
    const ws = new WebSocket(`${scheme}://${location.host}/ws`);
    app.ws = ws;
    setConn("connecting", "connecting…");
    ws.onopen = () => {
      app.backoff = 250;
      setConn("live", "live");
      if (app.token) send({ type: "auth", token: app.token });
    };
    ws.onmessage = (e) => {
      let msg;
      try { msg = JSON.parse(e.data); } catch { return; }
      handle(msg);
    };
    ws.onclose = () => {
      setConn("down", "disconnected, retrying…");
      app.ws = null;
      setTimeout(connect, app.backoff);
      app.backoff = Math.min(app.backoff * 2, 5000);
    };
  }

  function send(msg) {
    if (app.ws && app.ws.readyState === WebSocket.OPEN) {
      app.ws.send(JSON.stringify(msg));
      return true;
    }
    return false;
  }

  function setConn(state, text) {
    $("conn").dataset.state = state;
    $("conn-text").textContent = text;
  }

  function handle(msg) {
    switch (msg.type) {
      case "hello":
        document.title = `echomq dashboard · ${msg.version}`;
        app.archive = msg.archive || null;
        $("history-panel").hidden = !app.archive;
        break;
      case "status":
        $("banner").hidden = msg.ok;
        $("banner").textContent = msg.ok ? "" : `Cannot read Redis: ${msg.error}`;
        if (!msg.ok) setConn("down", "redis unreachable");
        else if (app.ws) setConn("live", "live");
        break;
      case "snapshot":
        app.snapshot = msg;
        app.receivedAt = performance.now();
        render();
        break;
      case "events":
        onEvents(msg.items, msg.dropped);
        break;
      case "auth":
        setAuthed(msg.ok);
        if (!msg.ok) toast("That token is not valid.", true);
        break;
      case "result":
        onResult(msg);
        break;
    }
  }

  // -- token -----------------------------------------------------------------------------

  function readTokenFromUrl() {
    const params = new URLSearchParams(location.hash.slice(1));
    const token = params.get("token");
    if (token) {
      sessionStorage.setItem("echomq-token", token);
      params.delete("token");
      const rest = params.toString();
      history.replaceState(null, "", location.pathname + location.search + (rest ? "#" + rest : ""));
    }
    app.token = sessionStorage.getItem("echomq-token") || "";
    const q = params.get("q");
    if (q) app.selected = q;
  }

  function setAuthed(ok) {
    app.authed = ok;
    const state = $("auth-state");
    state.dataset.ok = String(ok);
    state.textContent = ok ? "operator" : "read-only";
    $("token").hidden = ok;
    $("auth").querySelector("button").textContent = ok ? "Lock" : "Unlock";
    if (!ok) {
      sessionStorage.removeItem("echomq-token");
      app.token = "";
    }
    render();
  }

  $("auth").addEventListener("submit", (e) => {
    e.preventDefault();
    if (app.authed) {
      setAuthed(false);
      return;
    }
    const token = $("token").value.trim();
    if (!token) return;
    app.token = token;
    sessionStorage.setItem("echomq-token", token);
    $("token").value = "";
    send({ type: "auth", token });
  });

  // -- operator commands -----------------------------------------------------------------

  function command(action, queue, job, button) {
    if (!app.authed) {
      toast("Unlock with the operator token first.", true);
      return;
    }
    const key = `${action}:${queue}:${job || ""}`;
    if (CONFIRM.has(action) && !(app.armed.get(key) > Date.now())) {
      app.armed.set(key, Date.now() + 3000);
      if (button) {
        button.classList.add("confirm");
        button.textContent = `Confirm ${action}?`;
      }
      setTimeout(render, 3100);
      return;
    }
    app.armed.delete(key);
    const ref = ++app.ref;
    app.pending.set(ref, { action, queue, job });
    const msg = { type: "command", ref, action, queue, token: app.token };
    if (job) msg.job = job;
    if (!send(msg)) toast("Not connected.", true);
    if (button) button.disabled = true;
  }

  function onResult(msg) {
    if (msg.ref === app.history.ref && app.history.ref) {
      onHistory(msg);
      return;
    }
    if (msg.ref === app.flow.ref && app.flow.ref) {
      onFlow(msg);
      return;
    }
    const req = app.pending.get(msg.ref);
    app.pending.delete(msg.ref);
    if (!req) {
      if (!msg.ok) toast(msg.error || "refused", true);
      return;
    }
    const what = `${req.action} ${req.job ? shortId(req.job) : req.queue}`;
    if (msg.ok) {
      const value = msg.value === null || msg.value === undefined ? "" : ` → ${msg.value}`;
      toast(`${what}: done${value}`);
    } else {
      toast(`${what}: ${msg.error}`, true);
      if (msg.kind === "unauthorized") setAuthed(false);
    }
    render();
  }

  function opButton(label, action, queue, job, extraClass) {
    const key = `${action}:${queue}:${job || ""}`;
    const armed = app.armed.get(key) > Date.now();
    const el = h("button", {
      class: `btn small op ${extraClass || ""} ${armed ? "confirm" : ""}`,
      type: "button",
      disabled: !app.authed,
      title: app.authed ? `${action} ${job || queue}` : "needs the operator token",
      dataset: { action, job: job || "" },
      text: armed ? `Confirm ${action}?` : label,
    });
    el.addEventListener("click", () => command(action, queue, job, el));
    return el;
  }

  for (const id of ["q-pause", "q-resume", "q-drain"]) {
    const el = $(id);
    el.addEventListener("click", () => {
      if (app.selected) command(el.dataset.action, app.selected, null, el);
    });
  }

  // -- events ----------------------------------------------------------------------------

  function onEvents(items, dropped) {
    for (const item of items) {
      const ev = item.event;
      app.feed.unshift({ queue: item.queue, event: ev, at: Date.now() });
      // progress shows at once, without waiting for the next snapshot
      if (ev.event === "progress" && app.snapshot) {
        const q = app.snapshot.queues.find((x) => x.name === item.queue);
        const job = q && q.active.find((j) => j.id === ev.job);
        if (job) job.progress = ev.progress !== undefined ? String(ev.progress) : job.progress;
      }
    }
    app.feed.length = Math.min(app.feed.length, 200);
    $("feed-note").textContent = dropped ? `${dropped} events skipped (busy)` : "";
    renderFeed();
    renderActive();
  }

  function renderFeed() {
    const list = $("feed");
    list.replaceChildren(
      ...app.feed.slice(0, 80).map(({ queue, event, at }) => {
        const extra = event.error ? ` ${event.error}` : event.progress !== undefined ? ` ${event.progress}` : event.reason ? ` ${event.reason}` : "";
        return h("li", {},
          h("span", { class: "ago", text: new Date(at).toLocaleTimeString() }),
          h("span", { class: `ev ${event.event}`, text: event.event }),
          h("span", { class: "q", text: queue }),
          h("span", { text: `${event.job || ""}${extra}` }));
      }),
    );
  }

  // -- rendering -------------------------------------------------------------------------

  function current() {
    if (!app.snapshot) return null;
    const queues = app.snapshot.queues;
    if (!queues.length) return null;
    let q = queues.find((x) => x.name === app.selected);
    if (!q) {
      q = queues[0];
      app.selected = q.name;
    }
    return q;
  }

  function render() {
    renderTabs();
    const q = current();
    $("empty").hidden = !!q;
    $("queue").hidden = !q;
    if (!q) return;
    $("q-name").textContent = q.name;
    $("q-paused").hidden = !q.paused;
    $("q-pause").hidden = q.paused;
    $("q-resume").hidden = !q.paused;
    for (const id of ["q-pause", "q-resume", "q-drain"]) {
      const el = $(id);
      const key = `${el.dataset.action}:${q.name}:`;
      const armed = app.armed.get(key) > Date.now();
      el.disabled = !app.authed;
      el.title = app.authed ? "" : "needs the operator token";
      el.classList.toggle("confirm", armed);
      el.textContent = armed ? `Confirm ${el.dataset.action}?` : el.dataset.action[0].toUpperCase() + el.dataset.action.slice(1);
    }
    renderCounts(q);
    renderChart(q);
    renderMinutes(q);
    renderActive();
    renderWorkers(q);
    renderDead(q);
    renderGroups(q);
    renderFailures(q);
    renderRepeats(q);
    const f = app.flow;
    if (f.queue !== q.name) {
      f.queue = q.name;
      f.job = null;
      f.value = null;
      loadFlow();
    } else if (f.ref === 0 && Date.now() - f.loadedAt > 1000) loadFlow();
    if (app.archive) {
      const h = app.history;
      if (h.queue !== q.name) loadHistory(true);
      else if (!h.cursors.length && h.ref === 0 && Date.now() - h.loadedAt > 5000) loadHistory(false);
    }
  }

  // -- the last hour, by the minute (per-minute counters) ---------------------------------

  function renderMinutes(q) {
    const per = q.per_minute || {};
    const done = per.completed || [];
    const dead = per.dead || [];
    const cancelled = per.cancelled || [];
    // the last 60 s: this minute's count plus the unexpired share of the previous one
    const share = 1 - (serverNow() % 60000) / 60000;
    const lastMinute = (s) => (s.length ? s[s.length - 1] + Math.round((s.length > 1 ? s[s.length - 2] : 0) * share) : 0);
    $("min-completed").textContent = fmt(lastMinute(done));
    $("min-dead").textContent = fmt(lastMinute(dead));
    $("min-cancelled").textContent = fmt(lastMinute(cancelled));
    const capped = $("capped-note");
    capped.hidden = !q.capped;
    capped.textContent = q.capped
      ? `The retention's count guard deleted ${q.capped.toLocaleString()} rows or entries before their time: results are kept less long than keep_result says.`
      : "";
    const canvas = $("chart-minutes");
    const dpr = window.devicePixelRatio || 1;
    const width = canvas.clientWidth;
    const height = canvas.clientHeight;
    if (canvas.width !== width * dpr || canvas.height !== height * dpr) {
      canvas.width = width * dpr;
      canvas.height = height * dpr;
    }
    const ctx = canvas.getContext("2d");
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.clearRect(0, 0, width, height);
    const styles = getComputedStyle(document.documentElement);
    const color = (name) => styles.getPropertyValue(name).trim();
    const n = Math.max(done.length, 1);
    const totals = done.map((v, i) => v + (dead[i] || 0) + (cancelled[i] || 0));
    const top = niceMax(Math.max(1, ...totals));
    const left = 44, right = 8, pad = 8, bottom = 18;
    const plotW = width - left - right;
    const plotH = height - pad - bottom;
    const slot = plotW / n;
    const y = (v) => pad + plotH - (v / top) * plotH;
    ctx.font = "11px system-ui, sans-serif";
    ctx.fillStyle = color("--muted");
    ctx.textAlign = "right";
    ctx.fillText(fmt(top), left - 6, pad + 8);
    ctx.fillText("0", left - 6, pad + plotH);
    ctx.textAlign = "center";
    for (const back of [0, 15, 30, 45]) {
      const i = n - 1 - back;
      if (i >= 0) ctx.fillText(back ? `-${back} min` : "now", left + (i + 0.5) * slot, height - 4);
    }
    for (let i = 0; i < done.length; i++) {
      let base = 0;
      for (const [series, name] of [[done, "--completed"], [dead, "--dead"], [cancelled, "--cancelled"]]) {
        const v = series[i] || 0;
        if (!v) continue;
        ctx.fillStyle = color(name);
        ctx.fillRect(left + i * slot + 1, y(base + v), Math.max(1, slot - 2), y(base) - y(base + v));
        base += v;
      }
    }
  }

  // -- history (the archive) ---------------------------------------------------------------

  function loadHistory(reset) {
    const q = current();
    if (!q || !app.archive) return;
    const h = app.history;
    if (reset || h.queue !== q.name) {
      h.queue = q.name;
      h.cursors = [];
      h.page = null;
    }
    const before = h.cursors.length ? h.cursors[h.cursors.length - 1] : null;
    h.ref = ++app.ref;
    h.loadedAt = Date.now();
    const msg = { type: "history", ref: h.ref, queue: q.name, limit: 25 };
    if (before) msg.before = before;
    if (h.state) msg.state = h.state;
    if (!send(msg)) h.ref = 0;
  }

  function onHistory(msg) {
    const h = app.history;
    h.ref = 0;
    h.loadedAt = Date.now();
    if (!msg.ok) {
      $("history-note").textContent = msg.error || "the archive cannot be read";
      h.page = { jobs: [], next: null };
    } else {
      $("history-note").textContent = `from ${app.archive}${h.cursors.length ? `, page ${h.cursors.length + 1}` : ""}`;
      h.page = msg.value;
    }
    renderHistory();
  }

  function renderHistory() {
    const h = app.history;
    const jobs = h.page ? h.page.jobs : [];
    const rows = jobs.map((job) => {
      const text = job.state === "completed" ? job.result : job.state === "dead" ? job.error : job.reason;
      return h_row(job, text);
    });
    $("history-body").replaceChildren(...rows);
    $("history-table").hidden = rows.length === 0;
    $("history-empty").hidden = rows.length > 0;
    $("history-older").disabled = !(h.page && h.page.next);
    $("history-newest").disabled = h.cursors.length === 0;
  }

  function h_row(job, text) {
    return h("tr", { dataset: { job: job.id, state: job.state } },
      h("td", { class: "ago", title: new Date(job.finished_at_ms).toISOString(), text: ago(job.finished_at_ms) }),
      h("td", { class: "mono", title: job.id, text: shortId(job.id) }),
      h("td", { class: "mono", text: job.task || "—" }),
      h("td", {}, h("span", { class: `outcome ${job.state}`, text: job.state })),
      h("td", { class: "mono", text: String(job.token) }),
      h("td", { class: job.state === "dead" ? "err" : "history-text", text: text || "" }));
  }

  $("history-state").addEventListener("change", (e) => {
    app.history.state = e.target.value;
    loadHistory(true);
  });
  $("history-older").addEventListener("click", () => {
    const h = app.history;
    if (!h.page || !h.page.next) return;
    h.cursors.push(h.page.next);
    loadHistory(false);
  });
  $("history-newest").addEventListener("click", () => loadHistory(true));

  // -- flows: waiting parents and a flow's tree ---------------------------------------------

  function loadFlow() {
    const f = app.flow;
    if (!f.queue) return;
    f.ref = ++app.ref;
    f.loadedAt = Date.now();
    const msg = { type: "flow", ref: f.ref, queue: f.queue };
    if (f.job) msg.job = f.job;
    if (!send(msg)) f.ref = 0;
  }

  function showFlow(job) {
    app.flow.job = job || null;
    app.flow.value = null;
    loadFlow();
  }

  function onFlow(msg) {
    const f = app.flow;
    f.ref = 0;
    f.loadedAt = Date.now();
    if (!msg.ok) {
      $("flow-note").textContent = msg.error || "the flow cannot be read";
      $("flow-tree").hidden = true;
      return;
    }
    f.value = msg.value;
    renderFlow();
  }

  function flowNode(node) {
    const parts = [
      h("span", { class: `outcome ${node.state}`, text: node.state }),
      h("span", { class: "mono", title: node.id, text: shortId(node.id) }),
      h("span", { class: "mono flow-call", title: node.call || "", text: node.call || node.task || "" }),
    ];
    if (node.queue && node.queue !== app.flow.queue) parts.push(h("span", { class: "note flow-queue", text: `on ${node.queue}` }));
    if (node.kids !== undefined) {
      const waits = node.held ? "held: pages still being added" : `${node.open} of ${node.kids} open`;
      parts.push(h("span", { class: "note flow-count", text: `${waits}, ${node.failed} failed · policy ${node.policy}` }));
    }
    const li = h("li", { dataset: { job: node.id, state: node.state } }, h("div", { class: "flow-node" }, ...parts));
    if (node.children.length || node.more) {
      const kids = node.children.map(flowNode);
      if (node.more) kids.push(h("li", { class: "note", text: `… ${node.more} more not shown` }));
      li.append(h("ul", {}, ...kids));
    }
    return li;
  }

  function renderFlow() {
    const v = app.flow.value;
    const waiting = v ? v.waiting : [];
    $("flow-waiting").replaceChildren(...waiting.map((id) =>
      h("button", { class: "btn small mono", type: "button", dataset: { job: id }, title: id, text: shortId(id),
        onclick: () => showFlow(id) })));
    $("flow-empty").hidden = waiting.length > 0;
    const tree = v ? v.tree : null;
    $("flow-tree").hidden = !tree;
    $("flow-tree").replaceChildren(...(tree ? [flowNode(tree)] : []));
    $("flow-note").textContent = tree ? `the flow from ${shortId(tree.id)} down` : "waiting parents, the longest waiting first";
  }

  $("flow-show").addEventListener("click", () => showFlow($("flow-job").value.trim()));

  function renderTabs() {
    const queues = app.snapshot ? app.snapshot.queues : [];
    $("tabs").replaceChildren(
      ...queues.map((q) =>
        h("button", {
          class: "tab", type: "button", role: "tab",
          "aria-selected": String(q.name === app.selected),
          dataset: { queue: q.name },
          onclick: () => { app.selected = q.name; app.openLogs.clear(); render(); },
        },
        h("span", { text: q.name }),
        q.paused ? h("span", { class: "flag", text: "paused" }) : null,
        h("span", { class: "mini", text: `${q.counts.pending}·${q.counts.active}·${q.counts.dead}` })),
      ),
    );
  }

  function renderCounts(q) {
    const extra = {
      completed: `${q.totals.completed.toLocaleString()} ever`,
      dead: `${q.totals.dead.toLocaleString()} ever` +
        (q.totals.expired ? `, ${q.totals.expired.toLocaleString()} expired` : ""),
      cancelled: `${q.totals.cancelled.toLocaleString()} ever`,
    };
    $("counts").replaceChildren(
      ...STATES.map((s) =>
        h("div", { class: `count ${s}`, dataset: { state: s } },
          h("div", { class: "label", text: s }),
          h("div", { class: "value", dataset: { count: s }, text: q.counts[s].toLocaleString() }),
          h("div", { class: "extra", text: extra[s] || "\u00a0" }))),
    );
  }

  function renderChart(q) {
    const canvas = $("chart");
    const dpr = window.devicePixelRatio || 1;
    const width = canvas.clientWidth;
    const height = canvas.clientHeight;
    if (canvas.width !== width * dpr || canvas.height !== height * dpr) {
      canvas.width = width * dpr;
      canvas.height = height * dpr;
    }
    const ctx = canvas.getContext("2d");
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.clearRect(0, 0, width, height);
    const styles = getComputedStyle(document.documentElement);
    const color = (name) => styles.getPropertyValue(name).trim();
    const done = q.throughput.completed;
    const failed = q.throughput.failed;
    const slots = Math.max(60, done.length);
    const top = niceMax(Math.max(1, ...done, ...failed));
    const left = 44, right = 8, pad = 10, bottom = 20;
    const plotW = width - left - right;
    const plotH = height - pad - bottom;
    const x = (i, n) => left + plotW - (n - 1 - i) * (plotW / (slots - 1));
    const y = (v) => pad + plotH - (v / top) * plotH;

    ctx.font = "11px system-ui, sans-serif";
    ctx.fillStyle = color("--muted");
    ctx.strokeStyle = color("--line");
    ctx.lineWidth = 1;
    for (let i = 0; i <= 4; i++) {
      const v = (top * i) / 4;
      const yy = Math.round(y(v)) + 0.5;
      ctx.beginPath();
      ctx.moveTo(left, yy);
      ctx.lineTo(width - right, yy);
      ctx.stroke();
      ctx.textAlign = "right";
      ctx.fillText(fmt(v), left - 6, yy + 4);
    }
    const interval = app.snapshot.interval || 1;
    ctx.textAlign = "center";
    for (const secs of [0, 60, 120, 180, 240]) {
      const i = slots - 1 - secs / interval;
      if (i < 0) continue;
      const xx = left + (i * plotW) / (slots - 1);
      ctx.fillText(secs ? `-${secs / 60} min` : "now", xx, height - 4);
    }
    const line = (series, stroke, fill) => {
      if (series.length < 2) return;
      ctx.beginPath();
      series.forEach((v, i) => (i ? ctx.lineTo(x(i, series.length), y(v)) : ctx.moveTo(x(i, series.length), y(v))));
      ctx.strokeStyle = stroke;
      ctx.lineWidth = 2;
      ctx.lineJoin = "round";
      ctx.stroke();
      if (fill) {
        ctx.lineTo(x(series.length - 1, series.length), y(0));
        ctx.lineTo(x(0, series.length), y(0));
        ctx.closePath();
        ctx.globalAlpha = 0.12;
        ctx.fillStyle = stroke;
        ctx.fill();
        ctx.globalAlpha = 1;
      }
    };
    line(done, color("--completed"), true);
    line(failed, color("--dead"), false);
    const last = (s) => (s.length ? s[s.length - 1] : 0);
    $("rate-completed").textContent = fmt(last(done));
    $("rate-failed").textContent = fmt(last(failed));
  }

  function niceMax(v) {
    const p = Math.pow(10, Math.floor(Math.log10(v)));
    for (const m of [1, 2, 2.5, 5, 10]) if (v <= m * p) return m * p;
    return 10 * p;
  }

  function progressCell(progress) {
    if (progress === null || progress === undefined || progress === "") return h("span", { class: "progress-text", text: "—" });
    const n = Number(progress);
    if (Number.isFinite(n)) {
      const pct = Math.max(0, Math.min(100, n));
      const bar = h("div", { class: "bar", role: "progressbar", "aria-valuenow": String(pct) }, h("span"));
      bar.firstChild.style.width = `${pct}%`;
      return h("div", {}, bar, h("span", { class: "progress-text", text: `${fmt(pct)} %` }));
    }
    return h("span", { class: "progress-text", text: String(progress).slice(0, 60) });
  }

  function leaseCell(job) {
    const left = job.lease_deadline_ms - serverNow();
    // the lease length is not on the row: the longest time left seen is a good stand-in
    const span = Math.max(1, left, app.leaseSpan.get(job.id) || 0);
    app.leaseSpan.set(job.id, span);
    if (app.leaseSpan.size > 2000) app.leaseSpan.clear();
    const pct = Math.max(0, Math.min(100, (left / span) * 100));
    const bar = h("div", { class: `bar lease ${pct < 25 ? "low" : ""}` }, h("span"));
    bar.firstChild.style.width = `${pct}%`;
    const text = left >= 0 ? `${(left / 1000).toFixed(1)} s` : `lapsed ${(-left / 1000).toFixed(1)} s`;
    return h("div", { dataset: { deadline: job.lease_deadline_ms } }, bar, h("span", { class: "progress-text", text }));
  }

  function renderActive() {
    const q = current();
    if (!q) return;
    const rows = q.active.map((job) =>
      h("tr", { dataset: { job: job.id } },
        h("td", { class: "mono", title: job.id, text: shortId(job.id) }),
        h("td", {},
          h("div", { class: "call", title: job.call, text: job.call || job.task }),
          job.last_log ? h("div", { class: "lastlog", text: job.last_log.slice(0, 90) }) : null),
        h("td", {}, progressCell(job.progress)),
        h("td", {}, leaseCell(job)),
        h("td", { class: "mono", text: String(job.token) }),
        h("td", { class: "actions" }, opButton("Cancel", "cancel", q.name, job.id, "danger"))));
    $("active-body").replaceChildren(...rows);
    $("active-empty").hidden = rows.length > 0;
    $("active-table").hidden = rows.length === 0;
    const total = q.counts.active;
    $("active-note").textContent = total > q.active.length ? `showing ${q.active.length} of ${total}` : "";
  }

  function renderDead(q) {
    const rows = [];
    for (const job of q.dead) {
      const open = app.openLogs.has(job.id);
      const details = h("details", { open },
        h("summary", { text: `${job.logs.length} log line${job.logs.length === 1 ? "" : "s"}` }),
        h("pre", { class: "logs", text: job.logs.join("\n") || "(no logs)" }));
      details.addEventListener("toggle", () => {
        if (details.open) app.openLogs.add(job.id);
        else app.openLogs.delete(job.id);
      });
      rows.push(
        h("tr", { dataset: { job: job.id } },
          h("td", { class: "mono", title: job.id, text: shortId(job.id) }),
          h("td", {}, h("div", { class: "call", title: job.call, text: job.call || job.task }), details),
          h("td", { class: "mono", text: String(job.failures) }),
          h("td", { class: "err", text: job.last_error || "" }),
          h("td", { class: "ago", text: job.finished_at_ms ? ago(job.finished_at_ms) : "" }),
          h("td", { class: "actions" },
            opButton("Reprocess", "reprocess", q.name, job.id), " ",
            opButton("Remove", "remove", q.name, job.id, "danger"))));
    }
    $("dead-body").replaceChildren(...rows);
    $("dead-empty").hidden = rows.length > 0;
    $("dead-table").hidden = rows.length === 0;
    $("dead-note").textContent = q.counts.dead > q.dead.length ? `latest ${q.dead.length} of ${q.counts.dead}` : "";
  }

  function inTime(ms) {
    const s = (ms - serverNow()) / 1000;
    if (s < 0) return "due";
    if (s < 60) return `in ${s.toFixed(s < 10 ? 1 : 0)} s`;
    if (s < 3600) return `in ${Math.round(s / 60)} min`;
    if (s < 86400) return `in ${Math.round(s / 3600)} h`;
    return `in ${Math.round(s / 86400)} d`;
  }

  function renderRepeats(q) {
    const items = q.repeats || [];
    const rows = items.map((r) =>
      h("tr", { dataset: { repeat: r.key } },
        h("td", { class: "mono", text: r.key }),
        h("td", { class: "mono", text: r.task }),
        h("td", { text: r.schedule }),
        h("td", { class: "upcoming" },
          ...(r.paused
            ? [h("span", { class: "paused", text: "paused" })]
            : r.upcoming_ms.map((ms) =>
              h("div", { title: new Date(ms).toISOString(), text: `${new Date(ms).toISOString().slice(0, 19).replace("T", " ")}Z (${inTime(ms)})` })))),
        h("td", { class: "mono", text: String(r.runs) }),
        h("td", { class: "mono", title: r.last_job || "", text: r.last_job ? shortId(r.last_job) : "-" })));
    $("repeat-body").replaceChildren(...rows);
    $("repeat-empty").hidden = rows.length > 0;
    $("repeat-table").hidden = rows.length === 0;
    $("repeat-note").textContent = `${rows.length} registered`;
  }

  function workerStatus(w) {
    if (w.status === "blocked") {
      const since = Math.max(0, serverNow() - w.blocked_since_ms);
      return `blocked ${(since / 1000).toFixed(1)} s in ${w.blocked_task || "?"}`;
    }
    if (w.status === "gone") return `gone (no heartbeat for ${ago(w.last_beat_ms).replace(/ ago$/, "")})`;
    if (w.unreachable_ms != null && w.unreachable_until_ms != null) {
      return `running (Redis unreachable from it for ${(w.unreachable_ms / 1000).toFixed(1)} s, ${ago(w.unreachable_until_ms)})`;
    }
    return "running";
  }

  function renderWorkers(q) {
    const workers = q.workers || [];
    const rows = workers.map((w) =>
      h("tr", { dataset: { worker: w.id, status: w.status } },
        h("td", { class: "mono", title: w.id, text: w.id }),
        h("td", { class: `status ${w.status}`, title: w.blocked_job ? `job ${w.blocked_job}` : "", text: workerStatus(w) }),
        h("td", { text: w.host ? `${w.host}:${w.pid}` : "—" }),
        h("td", { class: "mono", text: w.status === "gone" ? "—" : `${w.held}/${w.concurrency}` }),
        h("td", { class: "mono", text: w.status === "gone" ? "—" : String(w.completed) }),
        h("td", { class: "mono", text: w.status === "gone" ? "—" : String(w.failed) }),
        h("td", { class: "ago", text: w.started_at_ms ? ago(w.started_at_ms) : "" }),
        h("td", { class: "ago", text: ago(w.last_beat_ms) })));
    $("workers-body").replaceChildren(...rows);
    $("workers-empty").hidden = rows.length > 0;
    $("workers-table").hidden = rows.length === 0;
  }

  const STANDING = { turn: "has a turn", limit: "at its limit", rate: "rate window full", idle: "idle" };

  function renderGroups(q) {
    const groups = q.groups || [];
    $("groups-panel").hidden = groups.length === 0;
    const rows = groups.map((g) =>
      h("tr", { dataset: { group: g.name } },
        h("td", { class: "mono", text: g.name }),
        h("td", { class: "mono", text: String(g.waiting) }),
        h("td", { class: "mono", text: String(g.active) }),
        h("td", { class: "mono", text: g.limit === null ? "-" : String(g.limit) }),
        h("td", { class: `standing ${g.standing}`, text: STANDING[g.standing] || g.standing })));
    $("groups-body").replaceChildren(...rows);
    $("groups-note").textContent = q.group_total > groups.length ? `first ${groups.length} of ${q.group_total} by name` : "";
  }

  function renderFailures(q) {
    const items = q.failures.map((f) =>
      h("li", {},
        h("span", { class: `outcome ${f.outcome}`, text: f.outcome }),
        h("span", { class: "mono", title: f.job, text: shortId(f.job) }),
        h("span", { class: "ago", text: ago(f.at_ms) }),
        h("span", { class: "err", text: f.error || "" })));
    $("failures").replaceChildren(...items);
    $("failures-empty").hidden = items.length > 0;
  }

  // lease countdowns move between snapshots (cells updated in place: buttons stay put)
  setInterval(() => {
    const q = current();
    if (!q) return;
    for (const job of q.active) {
      const row = document.querySelector(`#active-body tr[data-job="${CSS.escape(job.id)}"] td:nth-child(4)`);
      if (row) row.replaceChildren(leaseCell(job));
    }
  }, 250);
  window.addEventListener("resize", () => {
    const q = current();
    if (q) {
      renderChart(q);
      renderMinutes(q);
    }
  });

  readTokenFromUrl();
  connect();
})();
