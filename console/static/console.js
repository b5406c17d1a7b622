// spawnerd console: what every page shares. No framework, no build step.
'use strict';

window.SpawnerdConsole = (function () {
  // human is a duration in milliseconds as "3d 4h", "5h 12m", "12m", "40s".
  function human(ms) {
    let s = Math.max(0, Math.round(ms / 1000));
    const d = Math.floor(s / 86400), h = Math.floor(s / 3600) % 24, m = Math.floor(s / 60) % 60;
    if (d > 0) return d + 'd ' + h + 'h';
    if (h > 0) return h + 'h ' + m + 'm';
    if (m > 0) return m + 'm';
    return s + 's';
  }

  // poll fetches url every interval ms while the page is visible, sending
  // the last ETag; onData gets each changed answer (not the 304s). A 401
  // means the login expired: reloading the page logs in again.
  function poll(url, opts) {
    const interval = opts.interval || 2000;
    let etag = null, timer = null, stopped = false;
    async function tick() {
      timer = null;
      try {
        const headers = { 'Accept': opts.accept || 'application/json' };
        if (etag) headers['If-None-Match'] = etag;
        const resp = await fetch(url, { headers: headers, credentials: 'same-origin', cache: 'no-store' });
        if (resp.status === 401) { location.reload(); return; }
        if (resp.status !== 304) {
          if (!resp.ok) throw new Error(await errorText(resp));
          const body = opts.accept && opts.accept.indexOf('html') >= 0 ? await resp.text() : await resp.json();
          etag = resp.headers.get('ETag');
          opts.onData(body);
        }
        if (opts.onOK) opts.onOK();
      } catch (e) {
        if (opts.onError) opts.onError(e);
      } finally {
        if (!stopped && !document.hidden) timer = setTimeout(tick, interval);
      }
    }
    document.addEventListener('visibilitychange', function () {
      if (!document.hidden && timer === null && !stopped) tick();
    });
    tick();
    return { stop: function () { stopped = true; if (timer) clearTimeout(timer); } };
  }

  async function errorText(resp) {
    try {
      const j = await resp.json();
      if (j && j.error) return j.error;
    } catch (e) { /* not JSON */ }
    return resp.status + ' ' + resp.statusText;
  }

  // fragment parses server-rendered, template-escaped HTML into nodes of
  // this document; it is never used for data from elsewhere.
  function fragment(html) {
    const doc = new DOMParser().parseFromString(html, 'text/html');
    const out = document.createDocumentFragment();
    for (const n of Array.from(doc.body.childNodes)) out.appendChild(document.importNode(n, true));
    return out;
  }

  // loaded marks the page's data as rendered, for people (the busy state)
  // and for browser tests (data-loaded on the main container).
  function loaded(section) {
    if (section) section.setAttribute('aria-busy', 'false');
    const main = document.getElementById('main');
    if (main) main.dataset.loaded = 'true';
  }

  function showLoading(section, on) {
    if (!section) return;
    section.setAttribute('aria-busy', on ? 'true' : 'false');
    for (const el of section.querySelectorAll(':scope > .loading, :scope > * > .loading')) el.hidden = !on;
  }

  function el(tag, cls, text) {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined && text !== null) e.textContent = text;
    return e;
  }

  // Dialogs: a link or button with data-dialog opens that dialog as a
  // modal; without scripts the link's own URL renders it open.
  document.addEventListener('click', function (ev) {
    const opener = ev.target.closest('[data-dialog]');
    if (!opener) return;
    const dlg = document.getElementById(opener.dataset.dialog);
    if (!dlg || typeof dlg.showModal !== 'function') return;
    ev.preventDefault();
    if (!dlg.open) dlg.showModal();
  });

  return { human: human, poll: poll, fragment: fragment, loaded: loaded, showLoading: showLoading, el: el, errorText: errorText };
})();
