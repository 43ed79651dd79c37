// The relay console's one script: every data-every milliseconds it
// fetches the page's live part (data-fragment) and swaps it in, keeping
// the scroll; it stops while the tab is hidden, reloads the page when the
// session has ended (the login page), and asks before the forms that
// carry data-confirm. No library; the page works without it, only
// without refreshing itself.
(function () {
  'use strict';

  document.addEventListener('submit', function (ev) {
    var msg = ev.target.getAttribute('data-confirm');
    if (msg && !window.confirm(msg)) {
      ev.preventDefault();
    }
  });

  // The notice of the last action is shown once: a reload does not
  // show it again.
  if (window.location.search.indexOf('did=') !== -1) {
    window.history.replaceState(null, '', window.location.pathname + window.location.hash);
  }

  var live = document.getElementById('live');
  var status = document.getElementById('refresh');
  if (!live || !live.dataset.fragment) {
    return;
  }
  var every = parseInt(live.dataset.every, 10) || 2000;
  var busy = false;

  function say(text) {
    if (status) {
      status.textContent = text;
    }
  }

  function refresh() {
    if (busy || document.hidden) {
      return;
    }
    busy = true;
    fetch(live.dataset.fragment, {credentials: 'same-origin', cache: 'no-store', headers: {'Accept': 'text/html'}})
      .then(function (res) {
        if (res.status === 401) {
          window.location.reload();
          return null;
        }
        if (!res.ok) {
          throw new Error(res.status + ' ' + res.statusText);
        }
        return res.text();
      })
      .then(function (html) {
        if (html === null) {
          return;
        }
        var x = window.scrollX, y = window.scrollY;
        live.innerHTML = html;
        window.scrollTo(x, y);
        say('refreshes every ' + every / 1000 + ' s');
      })
      .catch(function (err) {
        say('refresh failed (' + err.message + '): retrying');
      })
      .then(function () {
        busy = false;
      });
  }

  window.setInterval(refresh, every);
})();
