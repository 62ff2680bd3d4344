// quarry's pages work without this file. It swaps search results in place (the URL follows, so
// back/forward and reload work), loads a hit's context when its "Context" is opened, and puts
// the cursor in the search box on "/".
(function () {
  "use strict";

  function fetchHtml(url, target, onDone) {
    target.setAttribute("aria-busy", "true");
    fetch(url, { credentials: "same-origin", headers: { "X-Requested-With": "fetch" } })
      .then(function (r) {
        if (r.status === 401) { window.location.assign("/login?next=" + encodeURIComponent(location.pathname + location.search)); return null; }
        return r.text();
      })
      .then(function (html) { if (html !== null) { target.innerHTML = html; if (onDone) onDone(); } })
      .catch(function () { target.innerHTML = '<p class="error" role="alert">The server did not answer.</p>'; })
      .then(function () { target.removeAttribute("aria-busy"); });
  }

  function query(form) {
    var params = new URLSearchParams();
    new FormData(form).forEach(function (value, key) { if (value !== "") params.append(key, value); });
    return params.toString();
  }

  function bindContext(root) {
    root.querySelectorAll("details.context[data-src]").forEach(function (d) {
      d.addEventListener("toggle", function () {
        if (!d.open || d.dataset.loaded) return;
        d.dataset.loaded = "1";
        fetchHtml(d.dataset.src, d.querySelector(".slot"));
      });
    });
  }

  document.addEventListener("DOMContentLoaded", function () {
    var form = document.getElementById("search");
    var results = document.getElementById("results");
    if (form && results) {
      bindContext(results);
      form.addEventListener("submit", function (event) {
        var qs = query(form);
        if (!form.elements.q.value.trim()) return;
        if (event.submitter && event.submitter.name === "ask") return;  // an answer is a page of its own
        event.preventDefault();
        history.pushState(null, "", "/?" + qs);
        document.title = form.elements.q.value + " · quarry";
        fetchHtml(form.dataset.fragment + "?" + qs, results, function () { bindContext(results); });
      });
      window.addEventListener("popstate", function () { window.location.reload(); });
    }
    document.addEventListener("keydown", function (event) {
      var box = document.getElementById("q");
      var tag = (event.target.tagName || "").toLowerCase();
      if (event.key === "/" && box && tag !== "input" && tag !== "textarea" && tag !== "select") {
        event.preventDefault();
        box.focus();
        box.select();
      }
    });
    var hit = document.querySelector(".chunk.hit");
    if (hit && !location.hash) hit.scrollIntoView({ block: "center" });
  });
})();
