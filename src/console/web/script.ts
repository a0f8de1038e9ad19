// The console's only script, served as /static/console.<hash>.js (assets.ts). Progressive:
// every page works without it (links, forms, a refresh link on the job page). With it, a
// "select all" box appears on the dead-letter list, and the job page follows its job.

export const CONSOLE_JS = `'use strict';
(function () {
  document.querySelectorAll('[data-select-all]').forEach(function (wrap) {
    var box = wrap.querySelector('input[type="checkbox"]');
    var form = box && box.form;
    if (!form) return;
    wrap.hidden = false;
    box.addEventListener('change', function () {
      form.querySelectorAll('input[type="checkbox"][name="id"]').forEach(function (b) { b.checked = box.checked; });
    });
  });

  var job = document.querySelector('[data-job-progress]');
  if (!job) return;
  var url = job.getAttribute('data-job-progress');
  var bar = job.querySelector('progress');
  var set = function (name, text) {
    var el = job.querySelector('[data-field="' + name + '"]');
    if (el) el.textContent = text;
  };
  var busy = false;
  var timer = setInterval(function () {
    if (busy) return;
    busy = true;
    fetch(url, { credentials: 'same-origin', headers: { accept: 'application/json' } })
      .then(function (r) { return r.ok ? r.json() : null; })
      .then(function (p) {
        busy = false;
        if (!p) return;
        if (bar) { bar.max = Math.max(p.expected, 1); bar.value = p.done; }
        set('done', String(p.done));
        set('expected', String(p.expected));
        set('moved', String(p.moved));
        set('notMoved', String(p.notMoved));
        set('rate', p.ratePerSecond === null ? '–' : p.ratePerSecond.toFixed(1) + '/s');
        set('elapsed', p.elapsedSeconds.toFixed(0) + ' s');
        if (p.status !== 'running') {
          clearInterval(timer);
          window.location.reload();
        }
      })
      .catch(function () { busy = false; });
  }, 1000);
})();
`;
