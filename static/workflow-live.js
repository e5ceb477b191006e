// The workflow page's live update (docs/workflows.md). Every 2 s it asks what changed since
// the last answer (GET /workflows/<id>/changes/?since=...) and applies only that: the state
// and counts at the top, and for each changed task its row, its box in the graph and the
// arrows leaving it. A page of a thousand tasks is megabytes; an update is a few hundred
// bytes per changed task. Once nothing can move any more, the page is loaded once, whole.
(function () {
  "use strict";
  const box = document.getElementById("workflow-status");
  if (!box || !box.dataset.live) return;
  const url = box.dataset.live;
  let since = box.dataset.since;

  function el(tag, className, text) {
    const node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined) node.textContent = text;
    return node;
  }

  function truncate(text, n) {  // as the template's truncatechars
    return text.length > n ? text.slice(0, n - 1) + "\u2026" : text;
  }

  function applyWorkflow(answer) {
    const state = document.getElementById("workflow-state");
    if (state) {
      state.textContent = answer.workflow.state;
      state.className = "state big state-" + answer.workflow.state;
    }
    const reason = document.getElementById("workflow-reason");
    if (reason && answer.workflow.reason) {
      reason.className = "";
      reason.replaceChildren(
        el("b", "", answer.workflow.state === "running" ? "Now:" : "Why:"),
        " " + answer.workflow.reason);
    }
    const counts = document.getElementById("workflow-counts");
    if (counts) {
      counts.replaceChildren(...answer.counts.map(([s, n]) => {
        const item = el("span", "count");
        item.append(el("span", "dot dag-" + s), n + " " + s);
        return item;
      }));
    }
  }

  function applyTask(t) {
    const row = document.getElementById("task-" + t.id);
    if (row) {
      row.dataset.state = t.state;
      const cell = row.querySelector(".state-cell");
      const parts = [el("span", "state state-" + t.shown, t.shown)];
      if (t.exit_code !== null && t.exit_code !== undefined) {
        parts.push(" ", el("small", "muted", "exit " + t.exit_code));
      }
      if (cell) cell.replaceChildren(...parts);
      const attempts = row.querySelector(".attempts .n");
      if (attempts) attempts.textContent = t.attempts;
      const why = row.querySelector(".why");
      if (why) {
        why.textContent = truncate(t.reason, 110);
        why.title = t.reason;
      }
    }
    const node = document.getElementById("dag-task-" + t.id);
    if (node) {
      node.setAttribute("class", "dag-node dag-" + t.state);
      node.dataset.state = t.state;
      const title = node.querySelector("title");
      if (title) {
        const name = title.textContent.split(" (#")[0];
        title.textContent = name + " (#" + t.id + "): " + t.state + (t.reason ? " \u2014 " + t.reason : "");
      }
      const st = node.querySelector(".sub .st");
      if (st) {
        st.textContent = t.state;
        const sub = st.parentNode;
        while (st.nextSibling) sub.removeChild(st.nextSibling);
        if (t.attempts > 1) sub.append(" \u00b7 attempt " + t.attempts);
      }
    }
    document.querySelectorAll('path[data-from="' + t.id + '"]').forEach((edge) => {
      edge.setAttribute("class", "dag-edge " + t.edges);
    });
  }

  async function tick() {
    let answer;
    try {
      const response = await fetch(url + "?since=" + encodeURIComponent(since), {
        headers: { Accept: "application/json" }, credentials: "same-origin" });
      if (!response.ok) throw new Error("HTTP " + response.status);
      answer = await response.json();
    } catch (err) {
      setTimeout(tick, 5000);  // the portal is restarting, or the network is down: later
      return;
    }
    applyWorkflow(answer);
    answer.tasks.forEach(applyTask);
    since = answer.since;
    box.dataset.since = since;
    if (answer.live) setTimeout(tick, 2000);
    else window.location.reload();
  }

  setTimeout(tick, 2000);
})();
