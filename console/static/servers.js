// The servers list: polled every 2 s, rows updated in place, filtered in
// the browser. Rows are built with the DOM (textContent), never parsed HTML.
// Every row stays in the table; at most `limit` matching rows are shown at
// once, since laying out thousands of visible rows takes seconds on a
// modest laptop, while hidden rows cost nothing.
'use strict';

(function () {
  const C = window.SpawnerdConsole;
  const root = document.getElementById('servers');
  if (!root) return;
  const body = document.getElementById('servers-body');
  const count = document.getElementById('servers-count');
  const errBox = document.getElementById('servers-error');
  const empty = document.getElementById('servers-empty');
  const form = document.getElementById('servers-filters');
  const more = document.getElementById('servers-more');
  const PAGE = 500;
  let limit = PAGE;
  const f = {
    q: document.getElementById('f-q'),
    status: document.getElementById('f-status'),
    course: document.getElementById('f-course'),
    cls: document.getElementById('f-class'),
  };
  // rows: key → {tr, cells, item, text}, tr and cells null until the row
  // is first shown, text null until a search needs it; order: the rows in
  // list order.
  const rows = new Map();
  let order = [];

  const COLS = ['user', 'server', 'profile', 'course', 'status', 'node', 'gpu-class', 'age', 'guarantee', 'event'];

  function keyOf(s) { return s.user + '\u0000' + s.server; }

  // proto is an empty row; build clones it, which costs the browser less
  // than making each row's thirteen elements one by one (the first 500
  // rows: 81 ms to 69 ms at p50 in the console benchmark).
  const proto = (function () {
    const tr = document.createElement('tr');
    for (const c of COLS) {
      const td = C.el('td', 'c-' + c);
      td.dataset.col = c;
      tr.appendChild(td);
    }
    tr.children[COLS.indexOf('user')].appendChild(document.createElement('a'));
    tr.children[COLS.indexOf('status')].append(C.el('span', 'pill'), ' ', C.el('span', 'muted'));
    return tr;
  })();

  function build() {
    const tr = proto.cloneNode(true);
    const cells = {};
    for (let i = 0; i < COLS.length; i++) cells[COLS[i]] = tr.children[i];
    cells.link = cells.user.firstChild;
    cells.pill = cells.status.firstChild;
    cells.note = cells.status.lastChild;
    return { tr: tr, cells: cells };
  }

  function statusWord(s) {
    if (s.status === 'pending' && s.waiting) return 'waiting';
    return s.status;
  }

  function fill(r, s) {
    const tr = r.tr, c = r.cells;
    tr.dataset.user = s.user;
    tr.dataset.server = s.server;
    tr.dataset.status = s.status;
    tr.dataset.reason = s.reason || '';
    tr.dataset.course = s.course || '';
    tr.dataset.gpuClass = s.gpu_class || '';
    tr.dataset.node = s.node || '';
    if (s.waiting) tr.dataset.waiting = 'true'; else delete tr.dataset.waiting;
    c.link.href = s.url;
    c.link.textContent = s.user;
    c.server.textContent = s.server || '(default)';
    c.profile.textContent = s.profile || '';
    c.course.textContent = s.course || '';
    const word = statusWord(s);
    c.pill.className = 'pill pill-' + word;
    c.pill.textContent = word === 'waiting' ? 'waiting for GPU' : word;
    let note = '';
    if (s.status === 'stopped') note = s.reason || '';
    else if (s.phase && s.phase.toLowerCase() !== s.status) note = s.phase;
    c.note.textContent = note;
    c.status.title = s.stopped && s.stopped.why ? s.stopped.why : (s.message || '');
    c.node.textContent = s.node || '';
    c['gpu-class'].textContent = s.gpu_class || '';
    c.guarantee.textContent = s.guarantee_status || '';
    c.guarantee.title = s.reservation || '';
    const ev = s.last_event;
    c.event.textContent = ev ? (ev.reason ? ev.reason + ': ' : '') + (ev.message || '') : '';
    c.event.title = ev ? ev.time_text + ' — ' + (ev.message || '') : '';
    c.event.classList.toggle('warn', !!ev && ev.type === 'Warning');
  }

  // textOf is what the search box matches a row's server against, made
  // on the first search that needs it.
  function textOf(r) {
    if (r.text === null) {
      const s = r.item, ev = s.last_event;
      r.text = [s.user, s.server, s.pod, s.node, s.profile, s.course, s.gpu_class, s.reason,
        s.stopped && s.stopped.stopper, ev && ev.reason].filter(Boolean).join(' ').toLowerCase();
    }
    return r.text;
  }

  // same is whether two values of the list's JSON are equal. Comparing
  // the parsed values costs less than keeping each row as a string to
  // compare: the first load of 2,000 rows compares nothing.
  function same(a, b) {
    if (a === b) return true;
    if (a === null || b === null || typeof a !== 'object' || typeof b !== 'object') return false;
    const ka = Object.keys(a);
    if (ka.length !== Object.keys(b).length) return false;
    for (const k of ka) if (!same(a[k], b[k])) return false;
    return true;
  }

  function age(r, now) {
    const s = r.item;
    let text = '', title = '';
    if (s.status === 'stopped' && s.stopped && s.stopped.at) {
      text = 'stopped ' + C.human(now - Date.parse(s.stopped.at)) + ' ago';
      title = s.stopped.at_text;
    } else if (s.created) {
      text = C.human(now - Date.parse(s.created));
      title = s.created_text;
    }
    if (r.cells.age.textContent !== text) r.cells.age.textContent = text;
    r.cells.age.title = title;
  }

  function ages() {
    const now = Date.now();
    for (const r of order) if (r.tr && !r.tr.hidden) age(r, now);
  }

  // apply takes a new list: rows kept by key, changed rows refilled, gone
  // rows removed, the server's order kept. A row's DOM is built only when
  // it is first shown (filter), so thousands of hidden rows cost nothing.
  function apply(list) {
    const seen = new Set();
    order = [];
    for (const s of list) {
      const k = keyOf(s);
      seen.add(k);
      let r = rows.get(k);
      if (!r) {
        r = { tr: null, cells: null, item: s, text: null };
        rows.set(k, r);
      } else if (!same(r.item, s)) {
        r.item = s;
        r.text = null;
        if (r.tr) fill(r, s);
      }
      order.push(r);
    }
    for (const [k, r] of rows) {
      if (!seen.has(k)) { if (r.tr) r.tr.remove(); rows.delete(k); }
    }
    options(f.course, list.map(function (s) { return s.course; }));
    options(f.cls, list.map(function (s) { return s.gpu_class; }));
    filter();
  }

  // place builds the rows to show that have no DOM yet and puts every
  // built row in list order.
  function place(shown) {
    const frag = body.firstChild ? null : document.createDocumentFragment();
    let prev = null;
    for (const r of order) {
      if (!r.tr) {
        if (!shown.has(r)) continue;
        const b = build();
        r.tr = b.tr;
        r.cells = b.cells;
        fill(r, r.item);
      }
      if (frag) {
        frag.appendChild(r.tr);
      } else {
        const want = prev ? prev.nextSibling : body.firstChild;
        if (want !== r.tr) body.insertBefore(r.tr, want);
      }
      prev = r.tr;
    }
    if (frag) body.appendChild(frag);
  }

  // options keeps a filter's choices to the values present (plus the one
  // chosen), rebuilt only when they change.
  function options(select, values) {
    const want = Array.from(new Set(values.filter(Boolean))).sort();
    const chosen = select.value || select.dataset.want || '';
    if (chosen && chosen !== '-' && want.indexOf(chosen) < 0) want.push(chosen);
    const sig = want.join('\u0000');
    if (select.dataset.sig === sig) return;
    select.dataset.sig = sig;
    while (select.options.length > 1) select.remove(1);
    select.add(new Option('None', '-'));
    for (const v of want) select.add(new Option(v, v));
    select.value = chosen;
    delete select.dataset.want;
  }

  function matches(r, q, st, course, cls) {
    const s = r.item;
    if (st && (st === 'waiting' ? !s.waiting : s.status !== st)) return false;
    if (course && (course === '-' ? !!s.course : s.course !== course)) return false;
    if (cls && (cls === '-' ? !!s.gpu_class : s.gpu_class !== cls)) return false;
    return !q || textOf(r).indexOf(q) >= 0;
  }

  function filter() {
    const q = f.q.value.trim().toLowerCase();
    const st = f.status.value, course = f.course.value, cls = f.cls.value;
    let matched = 0, shown = 0;
    const show = new Set();
    for (const r of order) {
      const ok = matches(r, q, st, course, cls);
      if (ok) matched++;
      if (ok && shown < limit) { shown++; show.add(r); }
    }
    place(show);
    for (const r of order) {
      if (r.tr && r.tr.hidden === show.has(r)) r.tr.hidden = !show.has(r);
    }
    const total = order.length;
    const noun = total === 1 ? ' server' : ' servers';
    let text = matched === total ? total + noun : matched + ' of ' + total + noun;
    if (shown < matched) text += ', ' + shown + ' shown';
    count.textContent = text;
    count.dataset.total = total;
    count.dataset.matched = matched;
    count.dataset.shown = shown;
    empty.hidden = matched !== 0;
    more.hidden = shown >= matched;
    more.textContent = 'Show ' + Math.min(PAGE, matched - shown) + ' more of ' + (matched - shown);
    ages();
    remember();
  }

  // refilter starts the shown rows over when a filter changes.
  function refilter() {
    limit = PAGE;
    filter();
  }

  // The filters live in the URL, so a filtered view can be shared.
  function remember() {
    const p = new URLSearchParams();
    if (f.q.value.trim()) p.set('q', f.q.value.trim());
    if (f.status.value) p.set('status', f.status.value);
    if (f.course.value) p.set('course', f.course.value);
    if (f.cls.value) p.set('class', f.cls.value);
    const qs = p.toString();
    const url = location.pathname + (qs ? '?' + qs : '');
    if (url !== location.pathname + location.search) history.replaceState(null, '', url);
  }

  function restore() {
    const p = new URLSearchParams(location.search);
    f.q.value = p.get('q') || '';
    f.status.value = p.get('status') || '';
    // Course and class options arrive with the data.
    f.course.dataset.want = p.get('course') || '';
    f.cls.dataset.want = p.get('class') || '';
  }

  let debounce = null;
  f.q.addEventListener('input', function () {
    clearTimeout(debounce);
    debounce = setTimeout(refilter, 120);
  });
  for (const s of [f.status, f.course, f.cls]) s.addEventListener('change', refilter);
  form.addEventListener('submit', function (ev) { ev.preventDefault(); refilter(); });
  more.addEventListener('click', function () {
    limit += PAGE;
    filter();
  });

  restore();
  C.poll(root.dataset.api, {
    interval: 2000,
    onData: function (data) { apply(data.servers || []); },
    onOK: function () {
      errBox.hidden = true;
      C.showLoading(root, false);
      C.loaded(root);
    },
    onError: function (e) {
      errBox.textContent = 'The list could not be refreshed: ' + e.message;
      errBox.hidden = false;
      C.showLoading(root, false);
    },
  });
  setInterval(ages, 15000);
})();
