// The sessions search: the table pages through the history by cursor (a
// stack of cursors gives "newer"), and the chart is server-rendered SVG.
'use strict';

(function () {
  const C = window.SpawnerdConsole;
  const root = document.getElementById('sessions');
  if (!root) return;
  if (root.dataset.disabled === 'true') {
    C.showLoading(root, false);
    C.showLoading(document.getElementById('chart'), false);
    C.showLoading(document.getElementById('sessions-list'), false);
    C.loaded(root);
    return;
  }
  const query = root.dataset.query || '';
  const list = document.getElementById('sessions-list');
  const chart = document.getElementById('chart');
  const chartBody = document.getElementById('chart-body');
  const body = document.getElementById('sessions-body');
  const errBox = document.getElementById('sessions-error');
  const empty = document.getElementById('sessions-empty');
  const prev = document.getElementById('prev');
  const next = document.getElementById('next');
  const label = document.getElementById('page-label');
  // cursors[i] is the cursor of page i+1; the first page has none.
  const cursors = [''];
  let page = 0, nextCursor = '', listDone = false, chartDone = false;

  function url(base, extra) {
    const p = new URLSearchParams(query);
    for (const k in extra) if (extra[k]) p.set(k, extra[k]);
    return base + '?' + p.toString();
  }

  function cell(tr, cls, text, title) {
    const td = C.el('td', cls, text || '');
    if (title) td.title = title;
    tr.appendChild(td);
    return td;
  }

  function row(s) {
    const tr = document.createElement('tr');
    tr.dataset.uid = s.uid;
    tr.dataset.user = s.user;
    tr.dataset.server = s.server;
    tr.dataset.stopper = s.stopper || '';
    tr.dataset.reason = s.reason || '';
    const started = cell(tr, 'c-started', s.started_text);
    started.dataset.time = s.started;
    const user = cell(tr, 'c-user');
    const a = C.el('a', null, s.user);
    a.href = s.url;
    user.appendChild(a);
    cell(tr, 'c-server', s.server || '(default)');
    cell(tr, 'c-course', s.course);
    cell(tr, 'c-class', s.gpu_class);
    cell(tr, 'c-ended', s.ended_text || 'not ended');
    cell(tr, 'c-duration', s.duration);
    cell(tr, 'c-stopper', s.stopper);
    cell(tr, 'c-reason', s.reason);
    cell(tr, 'c-why', s.why, s.why);
    return tr;
  }

  function done() {
    if (listDone && chartDone) C.loaded(root);
  }

  async function load() {
    C.showLoading(list, true);
    prev.disabled = next.disabled = true;
    errBox.hidden = true;
    try {
      const resp = await fetch(url(root.dataset.api, { cursor: cursors[page] }), {
        headers: { 'Accept': 'application/json' }, credentials: 'same-origin', cache: 'no-store',
      });
      if (resp.status === 401) { location.reload(); return; }
      if (!resp.ok) throw new Error(await C.errorText(resp));
      const data = await resp.json();
      const frag = document.createDocumentFragment();
      for (const s of data.sessions || []) frag.appendChild(row(s));
      body.replaceChildren(frag);
      empty.hidden = body.children.length !== 0;
      nextCursor = data.next || '';
      label.textContent = 'Page ' + (page + 1);
    } catch (e) {
      errBox.textContent = 'The sessions could not be loaded: ' + e.message;
      errBox.hidden = false;
    } finally {
      prev.disabled = page === 0;
      next.disabled = !nextCursor;
      C.showLoading(list, false);
      listDone = true;
      done();
    }
  }

  async function loadChart() {
    try {
      const resp = await fetch(url(root.dataset.chart, {}), {
        headers: { 'Accept': 'text/html' }, credentials: 'same-origin', cache: 'no-store',
      });
      if (resp.status === 401) { location.reload(); return; }
      if (!resp.ok) throw new Error(await C.errorText(resp));
      chartBody.replaceChildren(C.fragment(await resp.text()));
    } catch (e) {
      chartBody.replaceChildren(C.el('p', 'banner banner-error', 'The chart could not be loaded: ' + e.message));
    } finally {
      chart.setAttribute('aria-busy', 'false');
      chartDone = true;
      done();
    }
  }

  next.addEventListener('click', function () {
    if (!nextCursor) return;
    page++;
    cursors[page] = nextCursor;
    load();
  });
  prev.addEventListener('click', function () {
    if (page === 0) return;
    page--;
    load();
  });

  root.setAttribute('aria-busy', 'true');
  load();
  loadChart();
})();
