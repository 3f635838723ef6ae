// Clusternet dashboard: keeps an open page current. The hub sends a `change` event (server-sent
// events from its watch cache) naming the kinds that changed; when the page shows one of them
// (its main's data-kinds) it is fetched again and its content swapped in place. A page without
// kinds (the placement what-if) stays as it is. Without this script the pages still work,
// reloaded by hand.
"use strict";
(function () {
  const main = document.getElementById("main");
  if (!main || !window.EventSource) return;
  const kinds = (main.dataset.kinds || "").split(",").filter(Boolean);
  if (kinds.length === 0) return;
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
  events.addEventListener("change", (e) => {
    if (String(e.data).split(",").some((k) => kinds.includes(k))) refresh();
  });
})();
