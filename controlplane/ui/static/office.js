// officectl ui: the pages' one script (no library, nothing fetched but the
// page itself). Copy buttons; and on a live page (<main data-live>), every
// few seconds the page is fetched again and each element marked
// data-live-region is replaced by its new version, so a form being filled
// in is left alone. The pause toggle is remembered per browser.
"use strict";
(function () {
  var PERIOD_MS = 5000;
  var PAUSED_KEY = "office-ui-live-paused";

  document.addEventListener("click", function (event) {
    var button = event.target.closest("button.copy");
    if (!button) return;
    var text = button.getAttribute("data-copy") || "";
    var done = function () {
      button.classList.add("copied");
      setTimeout(function () { button.classList.remove("copied"); }, 1200);
    };
    if (navigator.clipboard && window.isSecureContext) {
      navigator.clipboard.writeText(text).then(done, function () {});
    }
  });

  function paused() {
    try { return window.localStorage.getItem(PAUSED_KEY) === "1"; } catch (e) { return false; }
  }

  function setPaused(value) {
    try { window.localStorage.setItem(PAUSED_KEY, value ? "1" : "0"); } catch (e) { /* private mode */ }
  }

  function refresh(toggle) {
    if (paused() || document.hidden) return;
    fetch(window.location.href, { credentials: "same-origin" })
      .then(function (response) {
        if (!response.ok) throw new Error(String(response.status));
        return response.text();
      })
      .then(function (body) {
        var page = new DOMParser().parseFromString(body, "text/html");
        document.querySelectorAll("[data-live-region]").forEach(function (old) {
          var fresh = old.id ? page.getElementById(old.id) : null;
          if (fresh) old.replaceWith(document.importNode(fresh, true));
        });
        toggle.classList.remove("stale");
        toggle.title = "refreshed " + new Date().toLocaleTimeString();
      })
      .catch(function () {
        toggle.classList.add("stale");
        toggle.title = "the last refresh failed; trying again";
      });
  }

  document.addEventListener("DOMContentLoaded", function () {
    var main = document.querySelector("main[data-live]");
    var toggle = document.getElementById("live-toggle");
    if (!main || !toggle) return;
    var show = function () {
      toggle.textContent = paused() ? "▶ live (paused)" : "❚❚ pause live";
      toggle.setAttribute("aria-pressed", paused() ? "true" : "false");
    };
    toggle.hidden = false;
    show();
    toggle.addEventListener("click", function () { setPaused(!paused()); show(); });
    setInterval(function () { refresh(toggle); }, PERIOD_MS);
  });
})();
