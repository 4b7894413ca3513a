// The Backups view: the fleet page (index.html) and a host's page (host.html), drawn from the
// plugin's JSON (api/fleet, api/hosts/<cluster>/<host>). Every path is relative: the page lives at
// <airflow base>/xtrabackup/, shown by Airflow's UI in an iframe; links to Airflow's own pages
// (DAG runs, task logs) go to ../dags/... in the top window. Text from the catalog is only ever
// set as text, never as HTML.
"use strict";

const LEVEL = { ok: 0, warning: 1, critical: 2 };

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k === "text") node.textContent = v;
    else if (k === "style") Object.assign(node.style, v);
    else node.setAttribute(k, v);
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function duration(seconds) {
  if (seconds === null || seconds === undefined) return "-";
  const s = Math.round(seconds);
  if (s < 90) return s + " s";
  if (s < 5400) return Math.round(s / 60) + " min";
  if (s < 172800) return (s / 3600).toFixed(1) + " h";
  return (s / 86400).toFixed(1) + " d";
}

function bytes(n) {
  if (n === null || n === undefined) return "-";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return (i ? n.toFixed(1) : n) + " " + units[i];
}

function utc(iso) {
  return iso ? iso.replace("T", " ").replace(/\.\d+/, "").replace("+00:00", "") : "-";
}

function badge(status) {
  return el("span", { class: "badge " + status, text: status });
}

function showMessage(text, link) {
  const box = document.getElementById("message");
  box.hidden = false;
  box.replaceChildren(text, link ? el("a", { href: "../", target: "_top", text: " Sign in to Airflow" }) : "");
}

async function getJSON(path) {
  const resp = await fetch(path, { credentials: "same-origin", headers: { Accept: "application/json" } });
  if (resp.status === 401 || resp.status === 403 || resp.status === 404) {
    const body = await resp.json().catch(() => ({}));
    showMessage((body.detail || "Not allowed") + ".", resp.status === 401);
    return null;
  }
  if (!resp.ok) {
    showMessage(`${path}: HTTP ${resp.status}`);
    return null;
  }
  return resp.json();
}

// Links to Airflow's own pages: the DAG run, and the task instance (its log).
function runHref(o) {
  return `../dags/${encodeURIComponent(o.dag_id)}/runs/${encodeURIComponent(o.run_id)}`;
}
function taskHref(o) {
  let href = `${runHref(o)}/tasks/${encodeURIComponent(o.task_id)}`;
  if (o.map_index !== undefined && o.map_index >= 0) href += `/mapped/${o.map_index}`;
  return o.try_number ? `${href}?try_number=${o.try_number}` : href;
}
function originLinks(o) {
  if (!o || !o.dag_id) return el("span", { class: "small", text: "CLI" });
  return el("span", {},
    el("a", { href: runHref(o), target: "_top", class: "run-link", text: "run" }), " · ",
    o.task_id ? el("a", { href: taskHref(o), target: "_top", class: "log-link", text: "log" }) : "");
}

// ---------------------------------------------------------------------------------------------
// Fleet page

const SORTS = {
  status: (r) => LEVEL[r.status],
  host: (r) => `${r.cluster}/${r.host}`,
  newest: (r) => (r.newest_backup ? -r.newest_backup.age_seconds : -Infinity),
  chain: (r) => (r.chain_length === null ? -1 : r.chain_length),
  pitr: (r) => (r.pitr ? Date.parse(r.pitr.until) - Date.parse(r.pitr.from) : -1),
  verified: (r) => (r.restore_test_age_seconds === null ? -Infinity : -r.restore_test_age_seconds),
  copies: (r) => Object.values(r.copies_behind).reduce((a, b) => a + b, 0),
  lag: (r) => (r.binlog_lag_seconds === null ? -1 : r.binlog_lag_seconds),
  finding: (r) => r.worst_finding || "",
};

const fleet = { data: null, sort: null, asc: false };

function pitrBar(row, axis) {
  const bar = el("div", { class: "pitr", title: row.pitr ? `${utc(row.pitr.from)} .. ${utc(row.pitr.until)} UTC` : "no point-in-time window" });
  if (!axis) return bar;
  const a = Date.parse(axis.from), b = Date.parse(axis.until), span = Math.max(b - a, 1);
  const pos = (iso) => Math.min(Math.max(((Date.parse(iso) - a) / span) * 100, 0), 100);
  if (row.pitr) {
    const left = pos(row.pitr.from);
    bar.append(el("div", { class: "win", style: { left: left + "%", width: Math.max(pos(row.pitr.until) - left, 0.5) + "%" } }));
  } else if (row.newest_backup) {
    bar.append(el("div", { class: "pt", style: { left: pos(row.newest_backup.finished_at) + "%" }, title: "newest backup (no binlogs)" }));
  }
  return bar;
}

function fleetRow(r, axis) {
  const host = `host.html?cluster=${encodeURIComponent(r.cluster)}&host=${encodeURIComponent(r.host)}`;
  const copies = Object.entries(r.copies_behind);
  return el("tr", { "data-host": `${r.cluster}/${r.host}`, "data-status": r.status },
    el("td", {}, badge(r.status)),
    el("td", {}, el("a", { href: host, class: "host-link", text: r.host }), el("div", { class: "small", text: r.cluster })),
    el("td", {}, r.newest_backup
      ? [el("div", { text: duration(r.newest_backup.age_seconds) + " ago" }), el("div", { class: "small", text: r.newest_backup.backup_id })]
      : el("span", { class: "small", text: "none" })),
    el("td", { class: "num", text: r.chain_length === null ? "-" : r.chain_length }),
    el("td", {}, pitrBar(r, axis), el("div", { class: "small", text: r.pitr ? `${duration((Date.parse(r.pitr.until) - Date.parse(r.pitr.from)) / 1000)} window` : "" })),
    el("td", {}, r.last_verified
      ? [el("div", { text: `${duration(r.restore_test_age_seconds)} ago (${r.last_verified.level})` }), el("div", { class: "small", text: r.last_verified.backup_id })]
      : el("span", { class: "small", text: "never" })),
    el("td", { class: "num", text: copies.length ? copies.map(([t, n]) => `${n} on ${t}`).join(", ") : "-" }),
    el("td", { class: "num", text: duration(r.binlog_lag_seconds) }),
    el("td", { class: "finding", text: r.worst_finding || "" }));
}

function drawFleet() {
  const { data } = fleet;
  const cluster = document.getElementById("f-cluster").value;
  const status = document.getElementById("f-status").value;
  let rows = data.hosts.filter((r) => (!cluster || r.cluster === cluster) && (!status || r.status === status));
  if (fleet.sort) {
    const key = SORTS[fleet.sort];
    rows = rows.slice().sort((x, y) => {
      const a = key(x), b = key(y);
      const c = a < b ? -1 : a > b ? 1 : 0;
      return fleet.asc ? c : -c;
    });
  }
  const table = document.getElementById("fleet");
  table.hidden = false;
  table.tBodies[0].replaceChildren(...rows.map((r) => fleetRow(r, data.axis)));
  for (const th of table.tHead.rows[0].cells) {
    th.classList.toggle("sorted", th.dataset.key === fleet.sort);
    th.classList.toggle("asc", th.dataset.key === fleet.sort && fleet.asc);
  }
  const counts = {};
  for (const r of rows) counts[r.status] = (counts[r.status] || 0) + 1;
  document.getElementById("summary").textContent =
    `${rows.length} host(s): ` + ["critical", "warning", "ok"].map((s) => `${counts[s] || 0} ${s}`).join(", ") +
    ` · read ${utc(data.generated_at)} UTC`;
  document.getElementById("axis").textContent = data.axis ? `(${utc(data.axis.from).slice(0, 10)} .. now)` : "";
}

async function fleetPage() {
  const data = await getJSON("api/fleet");
  if (!data) return;
  fleet.data = data;
  const params = new URLSearchParams(location.search);
  const fill = (id, values) => {
    const select = document.getElementById(id);
    for (const v of values) select.append(el("option", { value: v, text: v }));
    if (params.get(select.name)) select.value = params.get(select.name);
    select.addEventListener("change", drawFleet);
  };
  fill("f-cluster", data.clusters);
  fill("f-status", data.statuses.slice().reverse());
  for (const th of document.querySelectorAll("#fleet th")) {
    th.addEventListener("click", () => {
      fleet.asc = fleet.sort === th.dataset.key ? !fleet.asc : false;
      fleet.sort = th.dataset.key;
      drawFleet();
    });
  }
  if (!data.hosts.length) showMessage(data.clusters.length ? "No hosts match." : "You may read no cluster's backup DAG (mysql_backup_<cluster>).");
  drawFleet();
}

// ---------------------------------------------------------------------------------------------
// Host page

function timeAxis(from, until) {
  const a = Date.parse(from), b = Math.max(Date.parse(until), a + 1);
  return { a, b, pos: (iso) => ((Date.parse(iso) - a) / (b - a)) * 100 };
}

function drawTimeline(backups, axis) {
  const chains = new Map();
  for (const b of backups) {
    const root = b.chain_root || b.backup_id;
    if (!chains.has(root)) chains.set(root, []);
    chains.get(root).push(b);
  }
  const box = document.getElementById("timeline");
  for (const [root, members] of chains) {
    const track = el("div", { class: "track" });
    const first = axis.pos(members[0].finished_at), last = axis.pos(members[members.length - 1].finished_at);
    track.append(el("div", { class: "link", style: { left: first + "%", width: Math.max(last - first, 0) + "%" } }));
    for (const b of members) {
      const proved = b.proved_by.length ? "\nproved by: " + b.proved_by.map((p) => `${p.level} test of ${p.backup_id}`).join(", ") : "";
      track.append(el("div", {
        class: `node ${b.kind === "full" ? "full" : "inc"}${b.proved_by.length ? " proved" : ""}`,
        style: { left: axis.pos(b.finished_at) + "%" },
        title: `${b.backup_id} (${b.kind})\n${bytes(b.stored_bytes)} stored, ${b.storage_class}${proved}`,
        "data-backup": b.backup_id,
      }));
    }
    box.append(el("div", { class: "chain" }, el("div", { class: "label", text: `${root} (${members.length})` }), track));
  }
  const ticks = el("div", { class: "axis" });
  for (let i = 0; i <= 4; i++) {
    const t = new Date(axis.a + ((axis.b - axis.a) * i) / 4).toISOString();
    const shift = i === 0 ? "0" : i === 4 ? "-100%" : "-50%";  // the end labels stay inside the box
    ticks.append(el("span", { style: { left: i * 25 + "%", transform: `translateX(${shift})` }, text: utc(t).slice(5, 16) }));
  }
  box.append(ticks);
}

function drawBackups(backups) {
  document.querySelector("#backups tbody").replaceChildren(...backups.slice().reverse().map((b) => el("tr", { "data-backup": b.backup_id },
    el("td", { text: b.backup_id }),
    el("td", { text: b.kind === "full" ? "full" : `incremental (${b.chain_length})` }),
    el("td", { text: utc(b.finished_at) }),
    el("td", { class: "num", text: bytes(b.stored_bytes) }),
    el("td", { class: "num", text: bytes(b.raw_bytes) }),
    el("td", { text: b.storage_class }),
    el("td", { class: "small", text: b.targets.join(", ") }),
    el("td", {}, b.proved_by.length ? b.proved_by.map((p) => el("div", { class: "small", text: `${p.level}: ${p.backup_id}` })) : el("span", { class: "small", text: "-" })),
    el("td", {}, originLinks(b.origin)))));
}

function drawBinlogs(servers, axis) {
  const box = document.getElementById("binlogs");
  if (!servers.length) box.append(el("p", { class: "small", text: "No binlog is shipped for this host." }));
  for (const s of servers) {
    const bar = el("div", { class: "coverage" });
    for (const span of s.spans) {
      const left = Math.max(axis.pos(span.from), 0);
      bar.append(el("div", { class: "span", style: { left: left + "%", width: Math.max(axis.pos(span.until) - left, 0.3) + "%" }, title: `${span.first} .. ${span.last}: ${utc(span.from)} .. ${utc(span.until)}` }));
    }
    for (const gap of s.gaps) {
      const left = Math.max(axis.pos(gap.from), 0);
      bar.append(el("div", { class: "gap", style: { left: left + "%", width: Math.max(axis.pos(gap.until) - left, 0) + "%" }, title: `gap after ${gap.after}: ${gap.why}` }));
    }
    box.append(el("div", { class: "small", text: `server ${s.server_uuid}: ${s.spans.length} span(s), ${s.gaps.length} gap(s)` }), bar);
    if (s.error) box.append(el("p", { class: "small", text: s.error }));
    for (const gap of s.gaps) box.append(el("div", { class: "small gap-text", text: `gap from ${gap.first_missing} (after ${gap.after}, before ${gap.before}): ${gap.why}` }));
  }
}

function drawTests(tests) {
  document.querySelector("#tests tbody").replaceChildren(...tests.slice().reverse().map((t) => el("tr", { "data-backup": t.backup_id },
    el("td", { text: utc(t.finished_at) }),
    el("td", { text: t.backup_id }),
    el("td", { text: t.source ? `${t.level} (${t.source})` : t.level, title: t.source ? `read from storage target ${t.source}` : "" }),
    el("td", {}, badge(t.passed ? "ok" : "critical"), t.passed ? "" : el("div", { class: "small", text: t.reasons.slice(0, 2).join("; ") })),
    el("td", {}, el("ul", { class: "checks" }, t.results.map((c) => el("li", { class: c.status, title: c.note, text: `${c.status === "pass" ? "\u2713" : c.status === "fail" ? "\u2717" : "\u2013"} ${c.name}` })))),
    el("td", { class: "num", text: duration(t.restore_seconds) }),
    el("td", {}, originLinks(t.origin)))));
}

function drawCopies(copies) {
  document.querySelector("#copies tbody").replaceChildren(...copies.map((c) => el("tr", {},
    el("td", { text: c.target }),
    el("td", { class: "small", text: c.location }),
    el("td", { class: "num", text: c.backups }),
    el("td", { text: c.error ? `cannot be read: ${c.error}` : c.behind.map((b) => b.backup_id).join(", ") || "none" }),
    el("td", { class: "num", text: c.binlogs_behind }))));
}

async function hostPage() {
  const params = new URLSearchParams(location.search);
  const cluster = params.get("cluster"), host = params.get("host");
  document.getElementById("title").textContent = `${host} (${cluster})`;
  const data = await getJSON(`api/hosts/${encodeURIComponent(cluster)}/${encodeURIComponent(host)}`);
  if (!data) return;
  const r = data.row;
  document.getElementById("status-line").replaceChildren(badge(r.status), " ",
    r.newest_restorable ? `newest restorable ${r.newest_restorable}, ${duration(r.backup_age_seconds)} old` : "no restorable backup",
    r.pitr ? ` · point in time from ${utc(r.pitr.from)} to ${utc(r.pitr.until)} UTC` : "",
    ` · read ${utc(r.checked_at)} UTC`, data.source ? ` from storage target ${data.source}` : "");
  const show = (id) => { document.getElementById(id).hidden = false; };
  show("findings-section");
  document.getElementById("findings").replaceChildren(...r.findings.slice().sort((a, b) => LEVEL[b.status] - LEVEL[a.status])
    .map((f) => el("li", { class: f.status, text: `${f.status.toUpperCase()}: ${f.text}` })));
  const times = [...data.backups.map((b) => b.finished_at), ...data.binlogs.flatMap((s) => s.spans.flatMap((x) => [x.from, x.until]))];
  if (data.backups.length) {
    const sorted = times.slice().sort();
    const axis = timeAxis(sorted[0], r.checked_at > sorted[sorted.length - 1] ? r.checked_at : sorted[sorted.length - 1]);
    show("timeline-section");
    drawTimeline(data.backups, axis);
    drawBackups(data.backups);
    show("binlogs-section");
    drawBinlogs(data.binlogs, axis);
  }
  if (data.restore_tests.length) { show("tests-section"); drawTests(data.restore_tests); }
  if (data.copies.length) { show("copies-section"); drawCopies(data.copies); }
  if (data.problems.length) {
    show("problems-section");
    document.getElementById("problems").replaceChildren(...data.problems.map((p) => el("li", { text: p })));
  }
}

(document.body.dataset.page === "host" ? hostPage : fleetPage)().catch((err) => showMessage(String(err)));
