// Clusternet dashboard: keeps an open page current. The hub sends a `change` event (server-sent
// events from its watch cache) when what the pages show changes; the page is fetched again and
// its content swapped in place. Without this script the pages still work, reloaded by hand.
"use strict";
(function () {
  const main = document.getElementById("main");
  if (!main || !window.EventSource) return;
  let busy = false, again = false;
  async function refresh() {
    if (busy) { again = true; return; }
    busy = true;
    try {
      const r = await fetch(location.href, { cache: "no-store", headers: { Accept: "text/html" } });
      if (r.ok) {
        const doc = new DOMParser().parseFromString(await r.text(), "text/html");
        const next = doc.getElementById("main");
        if (next) {
          main.replaceChildren(...next.childNodes);
          document.body.dataset.updated = String(Date.now());
        }
      }
    } catch (e) {
      document.body.dataset.live = "error";
    } finally {
      busy = false;
      if (again) { again = false; refresh(); }
    }
  }
  const events = new EventSource("events");
  events.onopen = () => { document.body.dataset.live = "on"; };
  events.onerror = () => { document.body.dataset.live = "reconnecting"; };
  events.addEventListener("change", refresh);
})();
