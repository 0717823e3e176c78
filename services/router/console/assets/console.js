"use strict";
// The console: everything it shows comes from the REST API with the key
// kept in this tab (the same as the approvals page's), and is put in the
// page as text, never as markup.
(() => {
  let key = sessionStorage.getItem("conch-key") || "";
  const $ = (id) => document.getElementById(id);
  const sections = ["sandboxes", "approvals", "audit", "gateways"];

  function setStatus(msg, isError) {
    $("status").textContent = msg;
    $("status").className = isError ? "error" : "";
  }

  async function api(method, path, body) {
    const opts = { method, headers: { Authorization: "Bearer " + key } };
    if (body !== undefined) {
      opts.headers["Content-Type"] = "application/json";
      opts.body = JSON.stringify(body);
    }
    const resp = await fetch(path, opts);
    const text = await resp.text();
    let data = null;
    try { data = text ? JSON.parse(text) : null; } catch (e) { data = null; }
    if (!resp.ok) {
      throw new Error((data && data.error && data.error.message) || (method + " " + path + ": " + resp.status));
    }
    return data;
  }

  function cell(tr, text, cls) {
    const td = document.createElement("td");
    td.textContent = text == null ? "" : String(text);
    if (cls) td.className = cls;
    tr.appendChild(td);
    return td;
  }

  function button(label, onClick) {
    const b = document.createElement("button");
    b.type = "button";
    b.textContent = label;
    b.addEventListener("click", onClick);
    return b;
  }

  // Sandboxes.
  async function loadSandboxes() {
    const data = await api("GET", "/api/v1/sandboxes");
    const list = (data && data.sandboxes) || [];
    const body = $("sandbox-table").querySelector("tbody");
    body.replaceChildren();
    for (const s of list) {
      const tr = document.createElement("tr");
      cell(tr, s.id, "mono");
      cell(tr, s.name);
      cell(tr, (s.state || "").replace("SANDBOX_STATE_", "").toLowerCase());
      cell(tr, Object.entries(s.labels || {}).map(([k, v]) => k + "=" + v).join(", "));
      cell(tr, s.user);
      const td = cell(tr, "");
      td.appendChild(button("Terminal", () => openTerminal(s.id)));
      td.appendChild(button("Files", () => showFiles(s.id)));
      td.appendChild(button("Delete", () => removeSandbox(s.id)));
      body.appendChild(tr);
    }
    $("sandbox-empty").hidden = list.length > 0;
  }

  async function removeSandbox(id) {
    try {
      await api("DELETE", "/api/v1/sandboxes/" + encodeURIComponent(id));
      if ($("terminal-id").textContent === id) closeTerminal();
      setStatus("Sandbox " + id + " deleted.");
      await loadSandboxes();
    } catch (e) { setStatus(e.message, true); }
  }

  async function showFiles(id) {
    try {
      const data = await api("GET", "/v1/containers/" + encodeURIComponent(id) + "/files");
      const body = $("files-table").querySelector("tbody");
      body.replaceChildren();
      for (const f of (data && data.data) || []) {
        const tr = document.createElement("tr");
        cell(tr, f.path, "mono");
        cell(tr, f.bytes);
        body.appendChild(tr);
      }
      $("files-id").textContent = id;
      $("files-pane").hidden = false;
    } catch (e) { setStatus(e.message, true); }
  }

  // The terminal: a WebSocket opened with a short-lived token, since a
  // browser cannot send the key as a header.
  let term = null, sock = null;
  async function openTerminal(id) {
    closeTerminal();
    try {
      const t = await api("POST", "/api/v1/sandboxes/" + encodeURIComponent(id) + "/terminal:token", {});
      $("terminal-id").textContent = id;
      $("terminal-pane").hidden = false;
      term = new Terminal({ cols: 100, rows: 24, convertEol: false });
      term.open($("terminal"));
      const proto = location.protocol === "https:" ? "wss://" : "ws://";
      sock = new WebSocket(proto + location.host + t.url + "&rows=24&cols=100");
      sock.binaryType = "arraybuffer";
      const enc = new TextEncoder();
      sock.onmessage = (ev) => {
        if (typeof ev.data === "string") {
          const m = JSON.parse(ev.data);
          if (m.type === "exit") term.write("\r\n[exited " + (m.exit_code ?? "") + (m.reason ? ": " + m.reason : "") + "]\r\n");
          if (m.type === "approval_pending") term.write("\r\n[waiting for an approval]\r\n");
          return;
        }
        term.write(new Uint8Array(ev.data));
      };
      sock.onclose = () => setStatus("Terminal of " + id + " closed.");
      term.onData((d) => { if (sock && sock.readyState === 1) sock.send(enc.encode(d)); });
      // Tab belongs to the shell; Ctrl-] (the CLI's detach key) leaves
      // the terminal for the page, the terminal left open.
      term.attachCustomKeyEventHandler((e) => {
        if (e.type === "keydown" && e.ctrlKey && e.key === "]") {
          $("terminal-close").focus();
          return false;
        }
        return true;
      });
      term.focus();
      setStatus("Terminal of " + id + " open; Ctrl-] leaves it for the page.");
    } catch (e) { setStatus(e.message, true); }
  }

  function closeTerminal() {
    if (sock) { sock.close(); sock = null; }
    if (term) { term.dispose(); term = null; }
    $("terminal-pane").hidden = true;
    $("terminal-id").textContent = "";
  }

  // Approvals: how many wait; the approvals page decides them.
  async function loadApprovals() {
    const data = await api("GET", "/api/v1/approvals?state=pending");
    const list = (data && data.approvals) || [];
    $("pending-count").textContent = list.length ? "(" + list.length + ")" : "";
    $("approvals-summary").textContent = list.length === 1 ? "1 command waits for a decision." : list.length + " commands wait for a decision.";
    const ul = $("approval-list");
    ul.replaceChildren();
    for (const a of list) {
      const li = document.createElement("li");
      const pre = document.createElement("pre");
      pre.textContent = a.command;
      li.appendChild(pre);
      if (a.preview) {
        const p = document.createElement("p");
        p.className = "hint";
        p.textContent = "Has a preview: what it did on a copy of the sandbox, not a promise.";
        li.appendChild(p);
      }
      ul.appendChild(li);
    }
  }

  // Audit trail.
  async function loadAudit() {
    const q = new URLSearchParams({ page_size: "50" });
    for (const [id, name] of [["audit-q", "q"], ["audit-gateway", "gateway"], ["audit-user", "user"], ["audit-decision", "decision"]]) {
      if ($(id).value) q.set(name, $(id).value);
    }
    const data = await api("GET", "/api/v1/audit?" + q.toString());
    const body = $("audit-table").querySelector("tbody");
    body.replaceChildren();
    for (const r of (data && data.records) || []) {
      const tr = document.createElement("tr");
      cell(tr, r.time);
      cell(tr, r.kind);
      cell(tr, r.gateway);
      cell(tr, r.user);
      cell(tr, r.decision);
      cell(tr, r.command, "mono");
      body.appendChild(tr);
    }
  }

  // Gateways, read-only.
  async function loadGateways() {
    const data = await api("GET", "/api/v1/gateways");
    const div = $("gateway-list");
    div.replaceChildren();
    for (const g of (data && data.gateways) || []) {
      const box = document.createElement("div");
      box.className = "gateway";
      const h = document.createElement("h3");
      h.textContent = g.name;
      const pre = document.createElement("pre");
      pre.textContent = JSON.stringify(g, null, 2);
      box.append(h, pre);
      div.appendChild(box);
    }
  }

  const loaders = { sandboxes: loadSandboxes, approvals: loadApprovals, audit: loadAudit, gateways: loadGateways };

  async function show() {
    const name = sections.includes(location.hash.slice(1)) ? location.hash.slice(1) : "sandboxes";
    for (const s of sections) {
      $(s).hidden = s !== name;
      const link = $("nav-" + s);
      if (s === name) link.setAttribute("aria-current", "page"); else link.removeAttribute("aria-current");
    }
    if (!key) { setStatus("Enter your API key.", true); return; }
    try {
      await loaders[name]();
      if (name !== "approvals") await loadApprovals();
      if ($("status").className === "error") setStatus("");
    } catch (e) { setStatus(e.message, true); }
  }

  $("key-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    key = $("key").value.trim();
    sessionStorage.setItem("conch-key", key);
    $("key").value = "";
    setStatus("Key set.");
    show();
  });
  $("create-form").addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const body = {};
    const label = $("create-label").value.trim();
    if (label) {
      const [k, ...v] = label.split("=");
      body.labels = { [k]: v.join("=") };
    }
    try {
      const s = await api("POST", "/api/v1/sandboxes", body);
      setStatus("Sandbox " + s.id + " created.");
      $("create-label").value = "";
      await loadSandboxes();
    } catch (e) { setStatus(e.message, true); }
  });
  $("refresh").addEventListener("click", () => show());
  $("terminal-close").addEventListener("click", closeTerminal);
  $("audit-form").addEventListener("submit", (ev) => { ev.preventDefault(); show(); });
  window.addEventListener("hashchange", show);
  show();
})();
