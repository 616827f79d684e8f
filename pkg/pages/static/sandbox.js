// The sandbox phones follow what the simulated platform receives: the page polls its feed,
// a small JSON document, once a second and redraws a phone whose messages changed. Everything
// is built with DOM calls and textContent, so no text from a message is ever read as HTML.
"use strict";
(function () {
  const root = document.getElementById("phones");
  if (!root) return;
  const feed = root.dataset.feed;
  let version = "";

  function el(tag, cls, text) {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined) e.textContent = text;
    return e;
  }

  function message(m) {
    const li = el("li", "msg");
    li.dataset.ucs = m.ucsId;
    li.append(el("p", "msg-title", m.title), el("p", "msg-time", m.at));
    const dl = el("dl");
    for (const it of m.items || []) dl.append(el("dt", "", it.label), el("dd", "", it.value));
    li.append(dl);
    if (m.link) {
      const p = el("p", "msg-link", "详情 ");
      const en = el("span", "", "Details");
      en.lang = "en";
      p.append(en, " ›");
      li.append(p);
    }
    const st = el("p", "state state-" + m.state, m.stateText);
    st.dataset.state = m.state;
    li.append(st);
    return li;
  }

  function draw(phone) {
    const section = document.getElementById("phone-" + phone.userId);
    if (!section) return;
    const list = section.querySelector(".messages");
    const items = (phone.messages || []).map(message);
    if (items.length === 0) {
      const empty = el("li", "empty", "还没有消息 ");
      const en = el("span", "", "No messages yet");
      en.lang = "en";
      empty.append(en);
      items.push(empty);
    }
    list.replaceChildren(...items);
  }

  async function poll() {
    try {
      const r = await fetch(feed, { cache: "no-cache", credentials: "same-origin" });
      if (r.ok) {
        const d = await r.json();
        if (d.version !== version) {
          version = d.version;
          d.phones.forEach(draw);
        }
      }
    } catch (e) {
      // The stack may be restarting: the next poll tries again.
    }
    setTimeout(poll, 1000);
  }
  poll();
})();
