"use strict";
// The approvals page: polls the REST API so the list updates without a
// reload, and writes every value with textContent, never as HTML.
(function () {
  const $ = (id) => document.getElementById(id);
  let key = sessionStorage.getItem("conch-key") || "";
  const hash = new URLSearchParams(location.hash.slice(1));
  if (hash.get("key")) {
    key = hash.get("key");
    sessionStorage.setItem("conch-key", key);
    history.replaceState(null, "", location.pathname + location.search);
  }

  function setStatus(msg, error) {
    const s = $("status");
    s.textContent = msg;
    s.className = error ? "error" : "";
  }

  // escapeParts splits s into plain text and escapes. It follows the rules
  // of conch's one escaping function (services/internal/display, Escape),
  // which every other surface calls, and is tested with the same table:
  // "\\" for a backslash, "\n" and "\t", "\xNN" for the other C0
  // controls and DEL, "\uNNNN" or "\UNNNNNNNN" for every other character
  // that is not a visible letter, mark, number, punctuation or symbol
  // (C1 controls, format and bidi characters, separators other than the
  // space, private use, surrogates, noncharacters, unassigned), for
  // default-ignorable characters and for U+FFFD.
  const visible = /[\p{L}\p{M}\p{N}\p{P}\p{S}]/u;
  const ignorable = /\p{Default_Ignorable_Code_Point}/u;
  const hex = (cp, n) => cp.toString(16).padStart(n, "0");
  function escapeOne(ch) {
    const cp = ch.codePointAt(0);
    if (ch === "\\") return "\\\\";
    if (ch === "\n") return "\\n";
    if (ch === "\t") return "\\t";
    if (cp < 0x20 || cp === 0x7f) return "\\x" + hex(cp, 2);
    if (ch === " ") return null;
    const hidden = cp === 0xfffd || (cp & 0xfffe) === 0xfffe || (cp >= 0xfdd0 && cp <= 0xfdef) ||
      !visible.test(ch) || ignorable.test(ch);
    if (!hidden) return null;
    return cp > 0xffff ? "\\U" + hex(cp, 8) : "\\u" + hex(cp, 4);
  }
  function escapeParts(s) {
    const parts = [];
    let plain = "";
    for (const ch of s) {
      const esc = escapeOne(ch);
      if (esc === null) { plain += ch; continue; }
      if (plain) { parts.push({ text: plain }); plain = ""; }
      parts.push({ text: esc, escaped: true });
    }
    if (plain) parts.push({ text: plain });
    return parts;
  }

  function escapedNode(tag, s, cls) {
    const el = document.createElement(tag);
    if (cls) el.className = cls;
    for (const p of escapeParts(s || "")) {
      if (p.escaped) {
        const m = document.createElement("span");
        m.className = "escaped";
        m.textContent = p.text;
        el.appendChild(m);
      } else {
        el.appendChild(document.createTextNode(p.text));
      }
    }
    return el;
  }

  async function api(method, path, body) {
    // X-Conch-Client names this page as the surface recorded beside the
    // key when it answers an approval.
    const opts = { method, headers: { "Authorization": "Bearer " + key, "X-Conch-Client": "web" } };
    if (body !== undefined) {
      opts.headers["Content-Type"] = "application/json";
      opts.body = JSON.stringify(body);
    }
    const resp = await fetch(path, opts);
    const text = await resp.text();
    let data = null;
    try { data = text ? JSON.parse(text) : null; } catch (e) { data = null; }
    if (!resp.ok) {
      // Every error of the API is {"error": {"type", "code", "message", "param"}}.
      const msg = (data && data.error && data.error.message) || resp.statusText;
      const err = new Error(resp.status + ": " + msg);
      err.status = resp.status;
      throw err;
    }
    return data;
  }

  function field(dl, name, value) {
    const dt = document.createElement("dt");
    dt.textContent = name;
    dl.appendChild(dt);
    dl.appendChild(escapedNode("dd", value));
  }

  // Said wherever a preview is shown (display.PreviewCaveat).
  const previewCaveat = "what the command did on a copy of the sandbox, without network or secrets; not a promise: time, network and randomness differ when it runs";
  function previewNode(p) {
    const div = document.createElement("div");
    div.className = "preview";
    const h = document.createElement("p");
    h.textContent = "Preview (" + previewCaveat + "):";
    div.appendChild(h);
    const dl = document.createElement("dl");
    if (p.timed_out) field(dl, "ended", "stopped at the preview's time limit");
    else if ((p.exit_code || 0) >= 0) field(dl, "exit code", String(p.exit_code || 0));
    if (p.error) field(dl, "note", p.error);
    if (p.stdout) field(dl, "stdout", p.stdout);
    if (p.stderr) field(dl, "stderr", p.stderr);
    div.appendChild(dl);
    const ul = document.createElement("ul");
    ul.className = "changes";
    for (const c of p.changes || []) {
      ul.appendChild(escapedNode("li", c.change + " " + c.path + " (" + c.size_bytes + " bytes)", "change " + c.change));
    }
    if (p.changes_omitted) ul.appendChild(escapedNode("li", "and " + p.changes_omitted + " more changes"));
    if (!(p.changes || []).length && !p.error) ul.appendChild(escapedNode("li", "no file changed in /home/workspace or /tmp"));
    div.appendChild(ul);
    return div;
  }

  let shown = "";
  function renderPending(list) {
    const sig = JSON.stringify(list.map((a) => a.id));
    $("pending-count").textContent = String(list.length);
    $("empty").hidden = list.length > 0;
    if (sig === shown) return;
    shown = sig;
    const ul = $("pending");
    ul.replaceChildren();
    for (const a of list) {
      const li = document.createElement("li");
      li.className = "approval";
      li.dataset.id = a.id;
      li.appendChild(escapedNode("pre", a.command, "command"));
      const dl = document.createElement("dl");
      field(dl, "id", a.id);
      field(dl, "cwd", a.cwd);
      field(dl, "agent", a.agent);
      field(dl, "resolved", (a.resolved_paths || []).join(", "));
      field(dl, "host", a.host);
      field(dl, "security", a.security);
      field(dl, "session", a.session);
      field(dl, "user", a.user);
      field(dl, "expires", a.expires_at);
      li.appendChild(dl);
      if (a.preview) li.appendChild(previewNode(a.preview));
      if ((a.segments || []).length) {
        const ul = document.createElement("ul");
        ul.className = "segments";
        for (const seg of a.segments) {
          ul.appendChild(escapedNode("li", (seg.argv || []).join(" ") + " → " + (seg.resolved_path || "(not resolved)") + ": " + seg.decision + (seg.reason ? " — " + seg.reason : ""), "segment " + seg.decision));
        }
        li.appendChild(ul);
      }
      const choices = [["Allow once", "allow-once", "allow-once"]];
      if (a.session) choices.push(["Allow for this session", "allow-session", "allow-session"]);
      choices.push(["Allow always", "allow-always", "allow-always"], ["Deny", "deny", "deny"]);
      for (const [label, decision, cls] of choices) {
        const b = document.createElement("button");
        b.type = "button";
        b.textContent = label;
        b.className = cls;
        b.addEventListener("click", () => resolve(a.id, decision));
        li.appendChild(b);
      }
      ul.appendChild(li);
    }
  }

  async function resolve(id, decision) {
    try {
      const a = await api("POST", "/api/v1/approvals/" + encodeURIComponent(id) + ":resolve", { decision });
      setStatus("Approval " + a.id + ": " + a.state + " (" + a.decision + ")");
      shown = "";
      await refresh();
      if (decision === "allow-always") await loadAllowlist();
    } catch (e) {
      setStatus(e.message, true);
    }
  }

  async function refresh() {
    if (!key) { setStatus("Enter your API key to see pending approvals.", true); return; }
    try {
      const data = await api("GET", "/api/v1/approvals?state=pending");
      renderPending((data && data.approvals) || []);
    } catch (e) {
      setStatus(e.message, true);
    }
  }

  function agentName() { return $("agent").value.trim(); }

  async function loadAllowlist() {
    const agent = agentName();
    if (!key || !agent) return;
    try {
      const data = await api("GET", "/api/v1/exec-approvals/agents/" + encodeURIComponent(agent) + "/allowlist");
      const tbody = $("allowlist").querySelector("tbody");
      tbody.replaceChildren();
      for (const e of (data && data.entries) || []) {
        const tr = document.createElement("tr");
        tr.dataset.id = e.id;
        tr.appendChild(escapedNode("td", e.pattern, "pattern"));
        tr.appendChild(escapedNode("td", e.last_used_at && e.last_used_at !== "0" ? new Date(Number(e.last_used_at)).toISOString() : ""));
        tr.appendChild(escapedNode("td", e.last_used_command));
        tr.appendChild(escapedNode("td", e.last_resolved_path));
        const td = document.createElement("td");
        const b = document.createElement("button");
        b.type = "button";
        b.className = "remove";
        b.textContent = "Remove";
        b.addEventListener("click", async () => {
          try {
            await api("DELETE", "/api/v1/exec-approvals/agents/" + encodeURIComponent(agent) + "/allowlist/" + encodeURIComponent(e.id));
            setStatus("Removed " + e.pattern);
            await loadAllowlist();
          } catch (err) { setStatus(err.message, true); }
        });
        td.appendChild(b);
        tr.appendChild(td);
        tbody.appendChild(tr);
      }
    } catch (e) {
      setStatus(e.message, true);
    }
  }

  $("key-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    key = $("key").value.trim();
    sessionStorage.setItem("conch-key", key);
    $("key").value = "";
    setStatus("Key set.");
    shown = "";
    refresh();
    loadAllowlist();
  });
  $("agent-form").addEventListener("submit", (ev) => { ev.preventDefault(); loadAllowlist(); });
  $("add-form").addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const pattern = $("pattern").value.trim();
    try {
      const e = await api("POST", "/api/v1/exec-approvals/agents/" + encodeURIComponent(agentName()) + "/allowlist", { pattern });
      setStatus("Added " + e.pattern);
      $("pattern").value = "";
      await loadAllowlist();
    } catch (err) {
      setStatus(err.message, true);
    }
  });

  refresh();
  loadAllowlist();
  setInterval(refresh, 1000);
})();
