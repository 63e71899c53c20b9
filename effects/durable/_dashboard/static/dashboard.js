// effects.durable dashboard: live updates of a run's page over Server-Sent Events.
// The page works without this file: every view is current on reload.
"use strict";
(function () {
  const main = document.getElementById("main");
  if (!main || !main.dataset.stream || !window.EventSource) {
    return;
  }
  let version = main.dataset.version;
  let refreshing = false;

  async function refresh() {
    if (refreshing) {
      return;
    }
    refreshing = true;
    try {
      const response = await fetch(window.location.href, {
        headers: { Accept: "text/html" },
        credentials: "same-origin",
        cache: "no-store",
      });
      if (!response.ok) {
        return;
      }
      const page = new DOMParser().parseFromString(await response.text(), "text/html");
      const fresh = page.getElementById("main");
      if (fresh) {
        // A copy first: moving nodes out of the live list while walking it would skip half.
        const nodes = Array.from(fresh.childNodes);
        main.replaceChildren(...nodes);
        version = fresh.dataset.version;
        main.dataset.version = version;
        document.title = page.title;
      }
    } finally {
      refreshing = false;
    }
  }

  function seen(event) {
    const data = JSON.parse(event.data);
    if (data.version !== version) {
      refresh();
    }
  }

  const source = new EventSource(main.dataset.stream, { withCredentials: true });
  main.classList.add("streaming");
  source.addEventListener("change", seen);
  source.addEventListener("end", function (event) {
    source.close();
    main.classList.remove("streaming");
    seen(event);
  });
})();
