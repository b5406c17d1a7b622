// A server's detail page: its live part (status, reservation, Spark,
// timeline) is re-rendered by the server and swapped in when it changes.
'use strict';

(function () {
  const C = window.SpawnerdConsole;
  const live = document.getElementById('live');
  if (!live || !live.dataset.liveUrl) return;
  const url = live.dataset.liveUrl;
  C.poll(url, {
    interval: 2000,
    accept: 'text/html',
    onData: function (html) {
      const cur = document.getElementById('live');
      const frag = C.fragment(html);
      const next = frag.firstElementChild;
      if (!cur || !next || next.id !== 'live') return;
      // Keep what the reader opened.
      const open = new Set(Array.from(cur.querySelectorAll('details[open][id]')).map(function (d) { return d.id; }));
      for (const d of next.querySelectorAll('details[id]')) if (open.has(d.id)) d.open = true;
      cur.replaceWith(next);
    },
    onOK: function () { C.loaded(null); },
  });
})();
