/* The console's live refresh: while its switch (#orch-live) is on, fetch this
   same page every few seconds and swap its content (#content-main, and a run
   page's head) in place.
   No framework: the server draws the page as it always does. It pauses while
   the operator selects rows, types in a form or the tab is hidden, so nothing
   they are doing is swapped away; the switch's state is kept per browser. */
(function start() {
    "use strict";
    if (document.readyState === "loading") {  // loaded in the head, as the admin's media are
        document.addEventListener("DOMContentLoaded", start);
        return;
    }
    var KEY = "orchestration.live";
    var toggle = document.getElementById("orch-live");
    if (!toggle || !window.fetch || !window.DOMParser) {
        return;
    }
    var timer = null;
    toggle.checked = window.localStorage.getItem(KEY) !== "off";

    function busy() {
        var main = document.getElementById("content");
        if (!main || document.hidden) {
            return true;
        }
        if (main.querySelector("input.action-select:checked, #action-toggle:checked")) {
            return true;
        }
        var active = document.activeElement;
        if (active && active !== toggle && main.contains(active) && /^(INPUT|TEXTAREA|SELECT)$/.test(active.tagName)) {
            return true;
        }
        var fields = main.querySelectorAll("textarea, input[type=text]");
        for (var i = 0; i < fields.length; i++) {
            if (fields[i].value !== fields[i].defaultValue) {
                return true;
            }
        }
        return false;
    }

    function swap(html) {
        var fresh = new DOMParser().parseFromString(html, "text/html");
        // A run's page draws its head and its event form beside #content-main.
        ["orch-summary", "content-main", "orch-send-event", "changelist-filter"].forEach(function (id) {
            var now = document.getElementById(id);
            var next = fresh.getElementById(id);
            if (now && next) {
                // Folded sections stay as the operator left them.
                var open = Array.prototype.map.call(now.querySelectorAll("details"), function (d) { return d.open; });
                now.replaceWith(next);
                next.querySelectorAll("details").forEach(function (d, i) {
                    if (i < open.length) { d.open = open[i]; }
                });
            }
        });
        document.dispatchEvent(new CustomEvent("orchestration:refreshed"));
    }

    function tick() {
        timer = null;
        if (!toggle.checked) {
            return;
        }
        if (busy()) {
            schedule();
            return;
        }
        fetch(window.location.href, { credentials: "same-origin", headers: { "X-Orchestration-Live": "1" } })
            .then(function (response) { return response.ok ? response.text() : null; })
            .then(function (html) { if (html && toggle.checked && !busy()) { swap(html); } })
            .catch(function () { /* the next tick tries again */ })
            .then(schedule);
    }

    function schedule() {
        if (toggle.checked && timer === null) {
            timer = window.setTimeout(tick, Number(toggle.dataset.seconds || 3) * 1000);
        }
    }

    toggle.addEventListener("change", function () {
        window.localStorage.setItem(KEY, toggle.checked ? "on" : "off");
        window.clearTimeout(timer);
        timer = null;
        schedule();
    });
    // The run page's buttons ask before they discard or cancel.
    document.addEventListener("click", function (event) {
        var button = event.target.closest && event.target.closest("button[data-confirm]");
        if (button && !window.confirm(button.dataset.confirm)) {
            event.preventDefault();
        }
    });
    schedule();
})();
