// Lays out the cassette held in the #cassette-data block. Everything from the cassette is
// put on the page as text (textContent), never as markup.
(function () {
  "use strict";
  var data = JSON.parse(document.getElementById("cassette-data").textContent);
  var items = data.interactions;
  var app = document.getElementById("app");

  var CLASSES = [
    ["ok", "2xx / 1xx"],
    ["redirect", "3xx"],
    ["client", "4xx"],
    ["rate", "429 rate limit"],
    ["server", "5xx"],
    ["error", "transport error"],
    ["boundary", "function boundary"],
    ["raised", "boundary raised"]
  ];

  function el(tag, className, text) {
    var node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined && text !== null) node.textContent = String(text);
    return node;
  }

  function add(parent) {
    for (var i = 1; i < arguments.length; i++) {
      if (arguments[i]) parent.appendChild(arguments[i]);
    }
    return parent;
  }

  function ms(seconds) {
    if (seconds === null || seconds === undefined) return "–";
    var value = seconds * 1000;
    if (value >= 1000) return (value / 1000).toFixed(value >= 10000 ? 1 : 2) + " s";
    if (value >= 100) return value.toFixed(0) + " ms";
    if (value >= 1) return value.toFixed(1) + " ms";
    return value.toFixed(2) + " ms";
  }

  function bytes(count) {
    if (count < 1024) return count + " B";
    if (count < 1048576) return (count / 1024).toFixed(1) + " KiB";
    return (count / 1048576).toFixed(1) + " MiB";
  }

  function plural(count, word) {
    return count + " " + word + (count === 1 ? "" : "s");
  }

  // -- the span of time the waterfall covers --------------------------------------------
  var span = 0;
  var timed = 0;
  items.forEach(function (item) {
    if (item.offset !== null) {
      timed++;
      span = Math.max(span, item.offset + (item.duration || 0));
    }
  });
  if (!(span > 0)) span = 0.001;

  function niceStep(total) {
    var rough = total / 6;
    var power = Math.pow(10, Math.floor(Math.log10(rough)));
    var steps = [1, 2, 2.5, 5, 10];
    for (var i = 0; i < steps.length; i++) {
      if (steps[i] * power >= rough) return steps[i] * power;
    }
    return 10 * power;
  }

  function percent(seconds) {
    return Math.max(0, Math.min(100, (seconds / span) * 100));
  }

  // -- the top: name, summary, counts, legend, replay kit -------------------------------
  function buildTop() {
    var top = el("section", "top");
    var left = el("div");
    var title = el("h1", "", data.name);
    add(title, el("span", "tool", "agenttape view"));
    add(left, title);
    var parts = [plural(items.length, "interaction")];
    if (timed) parts.push("over " + ms(span));
    if (data.started) parts.push("first at " + data.started.replace("T", " ").replace("Z", " UTC"));
    add(left, el("p", "summary", parts.join(" · ")));
    if (data.kept) {
      add(left, el("p", "alert kept", data.kept.charAt(0).toUpperCase() + data.kept.slice(1)));
    }
    if (data.interrupted) {
      add(left, el("p", "alert cutshort", "Recording cut short: " + data.interrupted +
        ". What the code did after that was never recorded; record it again to the end."));
    }

    var tally = {};
    var ends = { cut: 0, closed_early: 0 };
    items.forEach(function (item) {
      tally[item["class"]] = (tally[item["class"]] || 0) + 1;
      if (item.end === "cut" || item.end === "closed_early") ends[item.end]++;
    });
    var counts = el("div", "counts");
    var words = {
      rate: "rate-limited (429)",
      client: "client error (4xx)",
      server: "server error (5xx)",
      error: "transport error",
      boundary: "boundary call",
      raised: "boundary raised"
    };
    Object.keys(words).forEach(function (name) {
      if (tally[name]) add(counts, el("span", "count b-" + name, tally[name] + " " + words[name]));
    });
    if (ends.cut) add(counts, el("span", "count b-server", ends.cut + " cut short"));
    if (ends.closed_early) add(counts, el("span", "count b-client", ends.closed_early + " closed early"));
    if (counts.childNodes.length) add(left, counts);

    var legend = el("div", "legend");
    CLASSES.forEach(function (pair) {
      var entry = el("span");
      add(entry, el("i", "swatch b-" + pair[0]), document.createTextNode(pair[1]));
      add(legend, entry);
    });
    var wait = el("span");
    add(wait, el("i", "swatch b-ok wait-swatch"), document.createTextNode("light: waiting for the first byte"));
    add(legend, wait);
    var ticks = el("span");
    add(ticks, document.createTextNode("white ticks: chunks arriving"));
    add(legend, ticks);
    var cut = el("span");
    add(cut, el("span", "endmark-inline b-server", "cut"), document.createTextNode("body cut by a transport error"));
    add(legend, cut);
    var early = el("span");
    add(early, el("span", "endmark-inline b-client", "closed early"), document.createTextNode("stream closed by the client"));
    add(legend, early);
    add(left, legend);

    var kit = el("details", "panel kit");
    kit.open = true;
    add(kit, el("summary", "", "Replay kit"));
    var table = el("table");
    data.kit.forEach(function (row) {
      var tr = el("tr");
      add(tr, el("th", "", row[0]), el("td", "", row[1]));
      add(table, tr);
    });
    if (!data.kit.length) add(table, add(el("tr"), el("td", "", "no header recorded")));
    add(kit, table);
    return add(top, left, kit);
  }

  // -- the waterfall --------------------------------------------------------------------
  var rows = [];

  function buildBar(item) {
    var track = el("div", "track");
    var step = niceStep(span);
    for (var t = step; t < span; t += step) {
      var line = el("i", "gridline");
      line.style.left = percent(t) + "%";
      add(track, line);
    }
    var bar = el("div", "bar c-" + item["class"]);
    if (item.offset === null) {
      bar.className += " notime";
      bar.title = "no timing recorded";
      bar.style.left = "0";
      return add(track, bar);
    }
    var duration = item.duration || 0;
    bar.style.left = percent(item.offset) + "%";
    bar.style.width = Math.max(percent(duration), 0) + "%";
    if (item["class"] === "error" || item["class"] === "raised") bar.className += " hatched";
    var wait = el("i", "wait");
    var share = duration > 0 && item.ttfb !== null ? Math.min(1, item.ttfb / duration) : 0;
    wait.style.width = share * 100 + "%";
    add(bar, wait, el("i", "recv"));
    if (duration > 0) {
      item.ticks.forEach(function (offset) {
        if (offset <= 0 || offset >= duration) return;
        var tick = el("i", "chunk");
        tick.style.left = (offset / duration) * 100 + "%";
        add(bar, tick);
      });
    }
    bar.title = item.status + " · " + ms(duration) + (item.ttfb !== null ? " (first byte " + ms(item.ttfb) + ")" : "");
    add(track, bar);
    if (item.end === "cut" || item.end === "closed_early") {
      var mark = el("span", "endmark " + item.end, item.end === "cut" ? "cut" : "closed early");
      var at = percent(item.offset + duration);
      if (at > 80) {
        mark.style.right = 100 - percent(item.offset) + "%";
        mark.style.marginRight = "4px";
      } else {
        mark.style.left = at + "%";
        mark.style.marginLeft = "4px";
      }
      add(track, mark);
    }
    return track;
  }

  function buildWaterfall() {
    var section = el("section", "panel waterfall");
    var head = el("div", "grid head");
    add(head, el("div", "", "#"), el("div", "", "call"), el("div", "", "status"), el("div", "", "model"));
    var axis = el("div", "axis");
    var step = niceStep(span);
    for (var t = 0; t <= span + 1e-12; t += step) {
      // The first label starts at the axis's left edge and one near its right edge ends at
      // it, so neither runs into the column beside the axis.
      var edge = t === 0 ? " first" : percent(t) > 88 ? " last" : "";
      var tick = el("span", "tick" + edge, ms(t).replace(".00 ", " ").replace(".0 ", " "));
      tick.style.left = percent(t) + "%";
      add(axis, tick);
    }
    add(head, axis, el("div", "", "time"));
    add(section, head);

    items.forEach(function (item, position) {
      var row = el("div", "grid row");
      row.setAttribute("role", "button");
      row.setAttribute("tabindex", "0");
      row.setAttribute("data-index", String(position));
      var call = el("div", "call");
      if (item.boundary !== "http") {
        add(call, el("span", "chip", item.boundary), el("span", "host", "function call"));
      } else {
        var slash = item.where.indexOf("/");
        var host = slash < 0 ? item.where : item.where.slice(0, slash);
        var path = slash < 0 ? "" : item.where.slice(slash);
        add(call, el("span", "method", item.method), el("span", "path", path), el("span", "host", host));
      }
      call.title = item.method + " " + item.url;
      var status = el("div");
      add(status, el("span", "badge b-" + item["class"], item.status));
      add(
        row,
        el("div", "num", item.index),
        call,
        status,
        el("div", "model", item.model || ""),
        buildBar(item),
        el("div", "ms", ms(item.duration))
      );
      row.addEventListener("click", function () {
        pick(position, true);
      });
      row.addEventListener("keydown", function (event) {
        if (event.key === "Enter" || event.key === " ") {
          event.preventDefault();
          pick(position, true);
        } else if (event.key === "ArrowDown" && position + 1 < rows.length) {
          event.preventDefault();
          rows[position + 1].focus();
          pick(position + 1, false);
        } else if (event.key === "ArrowUp" && position > 0) {
          event.preventDefault();
          rows[position - 1].focus();
          pick(position - 1, false);
        }
      });
      rows.push(row);
      add(section, row);
    });
    if (!items.length) add(section, el("p", "summary", "This cassette holds no interactions."));
    return section;
  }

  // -- one interaction in full ----------------------------------------------------------
  function headerTable(headers) {
    var box = el("details", "headerbox");
    box.open = headers.length <= 10;
    add(box, el("summary", "", plural(headers.length, "header")));
    var table = el("table", "headers");
    headers.forEach(function (pair) {
      add(table, add(el("tr"), el("td", "", pair[0]), el("td", "", pair[1])));
    });
    return add(box, table);
  }

  function bodyBlock(title, body) {
    var box = el("div");
    add(box, el("h3", "", title));
    var facts = [body.kind];
    if (body.kind === "sse") facts.push(plural(body.count, "event"));
    facts.push(bytes(body.size) + " stored");
    if (body.encoding) facts.push(body.encoding + (body.decoded_size !== undefined ? ", " + bytes(body.decoded_size) + " decoded" : ""));
    add(box, el("p", "bodyinfo", facts.join(" · ")));
    body.notes.forEach(function (note) {
      add(box, el("p", "note", note));
    });
    if (body.kind === "empty") return box;
    if (body.kind === "sse") {
      if (body.text) {
        add(box, el("p", "bodyinfo", "the text the stream spelled out"));
        add(box, el("pre", "streamtext", body.text));
      }
      if (body.events && body.events.length) {
        var table = el("table", "events");
        add(table, add(el("tr"), el("th", "", "#"), el("th", "", "arrived"), el("th", "", "event"), el("th", "", "data")));
        body.events.forEach(function (event) {
          var tr = el("tr", event.undispatched ? "undispatched" : "");
          var name = event.event || "";
          if (event.id !== undefined) name += (name ? " " : "") + "id=" + event.id;
          if (event.extra) {
            Object.keys(event.extra).forEach(function (key) {
              name += (name ? " " : "") + key + "=" + event.extra[key];
            });
          }
          var dataCell = el("td", "data", event.data);
          if (event.undispatched) dataCell.title = "no blank line after it: a client never dispatched it";
          add(tr, el("td", "n", event.n), el("td", "at", event.at === null ? "–" : ms(event.at)), el("td", "", name), dataCell);
          add(table, tr);
        });
        add(box, table);
      }
      return box;
    }
    add(box, el("pre", "body " + body.kind, body.text));
    return box;
  }

  function buildDetail(item) {
    var box = document.getElementById("detail");
    box.className = "panel";
    while (box.firstChild) box.removeChild(box.firstChild);
    var heading = el("h2");
    add(heading, el("span", "badge b-" + item["class"], item.status), document.createTextNode(" #" + item.index + " " + item.method + " " + item.url));
    add(box, heading);

    var facts = el("p", "facts");
    function fact(label, value) {
      if (facts.childNodes.length) facts.appendChild(document.createTextNode(" · "));
      add(facts, document.createTextNode(label + " "), el("b", "", value));
    }
    fact("boundary", item.boundary);
    if (item.started) fact("started", item.started.replace("T", " ").replace("Z", " UTC"));
    if (item.offset !== null) fact("at", "+" + ms(item.offset));
    fact("first byte", ms(item.ttfb));
    fact("total", ms(item.duration));
    if (item.response) fact("chunks", item.response.chunk_count);
    add(box, facts);
    if (item.injected) add(box, el("div", "alert injected", "injected: " + item.injected + " (a fault's answer, not the network's)"));

    if (item.llm) {
      var llm = el("div", "llm");
      Object.keys(item.llm).forEach(function (key) {
        var value = item.llm[key];
        if (value === null || value === undefined) return;
        var entry = el("span");
        add(entry, el("b", "", key), document.createTextNode(typeof value === "string" ? value : JSON.stringify(value)));
        add(llm, entry);
      });
      add(box, llm);
    }
    if (item.error) {
      var what = item.error.kind === "raised" ? "Raised " : "Transport error " + item.error.kind + ": ";
      add(box, el("div", "alert", what + item.error.type + (item.error.message ? ": " + item.error.message : "")));
    }
    if (item["class"] === "rate") {
      var retry = item.response.headers.filter(function (pair) {
        return pair[0].toLowerCase() === "retry-after";
      })[0];
      add(box, el("div", "alert rate", "Rate limited (429)" + (retry ? ": retry-after " + retry[1] : "")));
    }
    if (item.end && item.end !== "complete") {
      add(box, el("div", "alert" + (item.end === "closed_after_end" ? " warn" : ""), "Response body " + item.end_text));
    }

    var sides = el("div", "sides");
    var boundary = item.boundary !== "http";
    var request = el("div", "side request");
    add(request, el("h3", "", boundary ? "Call" : "Request"));
    add(request, el("p", "bodyinfo", item.method + " " + item.url));
    add(request, headerTable(item.request.headers));
    add(request, bodyBlock(boundary ? "Arguments" : "Request body", item.request.body));
    var response = el("div", "side response");
    if (item.response) {
      var head = item.response.http_version + " " + item.response.status + " " + item.response.reason;
      add(response, el("h3", "", boundary ? "Result" : "Response"));
      add(response, el("p", "bodyinfo", head));
      add(response, headerTable(item.response.headers));
      add(response, bodyBlock(boundary ? (item.error ? "Exception" : "Return value") : "Response body", item.response.body));
      if (item.response.trailers) {
        add(response, el("p", "bodyinfo", "Trailers"));
        add(response, headerTable(item.response.trailers));
      }
      if (item.grpc) {
        add(response, el("p", "bodyinfo", "gRPC status " + item.grpc.status_name + " (" + item.grpc.status + ")" + (item.grpc.details ? ": " + item.grpc.details : "")));
      }
    } else {
      add(response, el("h3", "", "Response"));
      add(response, el("p", "bodyinfo", "no response: the transport failed first"));
    }
    add(sides, request, response);
    add(box, sides);
    if (item.websocket) {
      var session = el("div", "side websocket");
      add(session, el("h3", "", "WebSocket frames"));
      add(session, el("p", "bodyinfo", item.websocket.summary));
      var list = el("pre", "body");
      list.textContent = item.websocket.frames.join("\n") +
        (item.websocket.left_out ? "\n… " + item.websocket.left_out + " more frames left out of this page" : "");
      add(session, list);
      add(box, session);
    }
  }

  var picked = -1;

  function pick(position, fromClick) {
    if (!(position >= 0 && position < items.length)) return;
    if (picked >= 0) rows[picked].classList.remove("picked");
    picked = position;
    rows[position].classList.add("picked");
    buildDetail(items[position]);
    var hash = "#i=" + position;
    if (location.hash !== hash) history.replaceState(null, "", hash);
    if (fromClick) document.getElementById("detail").scrollIntoView({ block: "start" });
  }

  function fromHash() {
    var match = /^#i=(-?\d+)$/.exec(location.hash);
    if (!match) return;
    var position = parseInt(match[1], 10);
    if (position < 0) position += items.length;
    pick(position, false);
  }

  add(app, buildTop(), buildWaterfall());
  var detail = el("section", "panel empty", "Click an interaction to read its request and response.");
  detail.id = "detail";
  add(app, detail);
  add(app, el("p", "footer", "made by " + data.generator + " · works offline · nothing on this page is loaded from the network"));
  window.addEventListener("hashchange", fromHash);
  fromHash();
})();
