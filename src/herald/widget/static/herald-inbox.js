/*
 * <herald-inbox>: Herald's notification inbox as a standard custom element (shadow DOM, no
 * framework, no build step). Served by `herald api` at /v1/widget/herald-inbox.js.
 *
 *   <script src="https://herald.example.com/v1/widget/herald-inbox.js" defer></script>
 *   <herald-inbox api="https://herald.example.com" token-provider="getHeraldToken"></herald-inbox>
 *
 * `token-provider` names a global async function answering an end-user JWT for Herald; it is
 * called at start and again whenever Herald answers 401. Attributes: `api` (Herald's base URL),
 * `token-provider`, `inline` (the panel always shown, no bell popover), `page-size` (1..100),
 * `push-worker` (opt-in browser notifications: the URL of the host's service worker, which
 * loads Herald's push handler with one line, `importScripts("<api>/v1/widget/herald-push-sw.js")`;
 * set, the preferences tab shows a "Browser notifications" switch).
 * Events: `herald-notification` (detail: the stream's event), `herald-count` (detail: {count}).
 *
 * The live stream is read with fetch() rather than EventSource, which cannot send the
 * Authorization header the stream route requires. A stream event is only a hint (no title), so
 * each one refetches the badge and the first page; after a reconnect the same refetch puts the
 * badge right without waiting for the next event. Everything from the server is put on the page
 * as text; an action link is made only of an http(s) URL.
 *
 * Theming: CSS custom properties (--herald-accent, --herald-bg, --herald-fg, --herald-muted,
 * --herald-border, --herald-radius, --herald-font, --herald-badge-bg, --herald-badge-fg,
 * --herald-panel-width) and parts (bell, badge, panel, tabs, tab, list, item, item-title,
 * item-body, action, button, preferences, status).
 */
(() => {
  'use strict';
  if (window.customElements.get('herald-inbox')) return;

  const TEXTS = {
    en: {
      notifications: 'Notifications',
      unread: (n) => (n === 1 ? '1 unread notification' : `${n} unread notifications`),
      inbox: 'Inbox',
      preferences: 'Preferences',
      markRead: 'Mark read',
      markAllRead: 'Mark all read',
      markedAll: (n) => `Marked ${n} read.`,
      read: 'read',
      more: 'Load more',
      empty: 'Nothing here yet.',
      open: 'Open',
      close: 'Close',
      live: 'live',
      connecting: 'connecting…',
      reconnecting: 'reconnecting…',
      expired: 'signed out',
      off: 'offline',
      loadFailed: 'Could not load the notifications.',
      gone: 'That notification is no longer available.',
      allCategories: 'All categories',
      atAll: (c) => `${c} at all`,
      by: (cat, c) => `${cat} by ${c}`,
      locked: 'locked',
      lockedTitle: 'always delivered',
      version: (v) => `version ${v}`,
      saving: 'Saving…',
      saved: (v) => `Saved (version ${v}).`,
      conflict:
        'These preferences were changed elsewhere meanwhile, so nothing was saved. ' +
        'The current ones are shown again: make your change once more.',
      notSaved: 'Not saved.',
      prefsFailed: 'Could not load the preferences.',
      quietHours: 'Quiet hours',
      quietFrom: 'from',
      quietUntil: 'until',
      quietHint: 'Email, SMS, push and chat wait until the end; the inbox and sign-in codes do not.',
      channels: {
        in_app: 'In-app',
        email: 'Email',
        push: 'Push',
        sms: 'SMS',
        telegram: 'Telegram',
        slack: 'Slack',
        teams: 'Teams',
        whatsapp: 'WhatsApp',
      },
      browserPush: 'Browser notifications',
      pushOn: 'This browser shows your notifications.',
      pushOff: 'This browser does not show your notifications.',
      pushWorking: 'Asking the browser…',
      pushBlocked: "Notifications are blocked in this browser's site settings.",
      pushUnsupported: 'This browser cannot show notifications from this page.',
      pushFailed: 'Could not change browser notifications.',
    },
    ne: {
      notifications: 'सूचनाहरू',
      unread: (n) => `${n} नपढिएका सूचना`,
      inbox: 'इनबक्स',
      preferences: 'प्राथमिकताहरू',
      markRead: 'पढियो',
      markAllRead: 'सबै पढियो',
      markedAll: (n) => `${n} वटा पढिएको चिन्ह लगाइयो।`,
      read: 'पढिएको',
      more: 'थप हेर्नुहोस्',
      empty: 'अहिलेसम्म केही छैन।',
      open: 'खोल्नुहोस्',
      close: 'बन्द गर्नुहोस्',
      live: 'प्रत्यक्ष',
      connecting: 'जोड्दै…',
      reconnecting: 'फेरि जोड्दै…',
      expired: 'साइन आउट भयो',
      off: 'अफलाइन',
      loadFailed: 'सूचनाहरू लोड गर्न सकिएन।',
      gone: 'त्यो सूचना अब उपलब्ध छैन।',
      allCategories: 'सबै वर्ग',
      atAll: (c) => `${c} पूरै`,
      by: (cat, c) => `${cat}: ${c}`,
      locked: 'बन्द',
      lockedTitle: 'सधैं पठाइन्छ',
      version: (v) => `संस्करण ${v}`,
      saving: 'सेभ गर्दै…',
      saved: (v) => `सेभ भयो (संस्करण ${v})।`,
      conflict:
        'यी प्राथमिकताहरू बीचमा अर्को ठाउँबाट बदलिए, त्यसैले केही सेभ भएन। ' +
        'हालका प्राथमिकताहरू फेरि देखाइएका छन्: आफ्नो परिवर्तन फेरि गर्नुहोस्।',
      notSaved: 'सेभ भएन।',
      prefsFailed: 'प्राथमिकताहरू लोड गर्न सकिएन।',
      quietHours: 'शान्त समय',
      quietFrom: 'देखि',
      quietUntil: 'सम्म',
      quietHint: 'इमेल, एसएमएस, पुश र च्याट अन्त्यसम्म पर्खन्छन्; इनबक्स र साइन-इन कोड पर्खँदैनन्।',
      channels: {
        in_app: 'एपमा',
        email: 'इमेल',
        push: 'पुश',
        sms: 'एसएमएस',
        telegram: 'टेलिग्राम',
        slack: 'स्ल्याक',
        teams: 'टिम्स',
        whatsapp: 'ह्वाट्सएप',
      },
      browserPush: 'ब्राउजर सूचनाहरू',
      pushOn: 'यो ब्राउजरले तपाईंका सूचनाहरू देखाउँछ।',
      pushOff: 'यो ब्राउजरले तपाईंका सूचनाहरू देखाउँदैन।',
      pushWorking: 'ब्राउजरलाई सोध्दै…',
      pushBlocked: 'यो ब्राउजरको साइट सेटिङमा सूचनाहरू रोकिएका छन्।',
      pushUnsupported: 'यो ब्राउजरले यो पेजबाट सूचनाहरू देखाउन सक्दैन।',
      pushFailed: 'ब्राउजर सूचनाहरू बदल्न सकिएन।',
    },
  };

  const CSS = `
:host { --herald-accent: #2457c5; --herald-bg: #fff; --herald-fg: #1d2330; --herald-muted: #5c6578;
  --herald-border: #d8dce5; --herald-radius: 8px; --herald-font: system-ui, sans-serif;
  --herald-badge-bg: #c62828; --herald-badge-fg: #fff; --herald-panel-width: 24rem;
  display: inline-block; position: relative; font-family: var(--herald-font); color: var(--herald-fg); }
:host([inline]) { display: block; }
[hidden] { display: none !important; }
button { font: inherit; cursor: pointer; border: 1px solid var(--herald-border); background: var(--herald-bg);
  color: var(--herald-fg); border-radius: calc(var(--herald-radius) / 2); padding: .25rem .6rem; }
button:focus-visible, a:focus-visible, input:focus-visible, [role=tab]:focus-visible {
  outline: 2px solid var(--herald-accent); outline-offset: 2px; }
.bell { display: inline-flex; align-items: center; gap: .35rem; position: relative; }
.bell svg { width: 1.2rem; height: 1.2rem; }
.badge { min-width: 1.3rem; padding: 0 .3rem; border-radius: 999px; background: var(--herald-badge-bg);
  color: var(--herald-badge-fg); font-size: .8rem; text-align: center; }
.badge.zero { background: var(--herald-border); color: var(--herald-muted); }
.panel { background: var(--herald-bg); border: 1px solid var(--herald-border); border-radius: var(--herald-radius);
  width: var(--herald-panel-width); max-width: 95vw; box-shadow: 0 6px 24px rgba(0,0,0,.15); padding: .75rem; }
:host(:not([inline])) .panel { position: absolute; right: 0; top: calc(100% + .4rem); z-index: 1000; }
:host([inline]) .panel { width: auto; box-shadow: none; margin-top: .5rem; }
.head { display: flex; align-items: center; gap: .5rem; justify-content: space-between; }
.tabs { display: flex; gap: .25rem; }
[role=tab] { border: none; border-bottom: 2px solid transparent; border-radius: 0; }
[role=tab][aria-selected=true] { border-bottom-color: var(--herald-accent); color: var(--herald-accent); }
.live { font-size: .75rem; color: var(--herald-muted); }
.live[data-state=live] { color: #2e7d32; }
ol { list-style: none; margin: .5rem 0; padding: 0; max-height: 28rem; overflow: auto; }
:host([inline]) ol { max-height: none; }
li.item { display: flex; gap: .5rem; justify-content: space-between; padding: .5rem; border-top: 1px solid var(--herald-border); }
li.item.unread { background: color-mix(in srgb, var(--herald-accent) 7%, transparent); }
.item-title { font-weight: 600; }
.item.unread .item-title::before { content: '• '; color: var(--herald-accent); }
.item-body, .meta, .subtle { color: var(--herald-muted); font-size: .85rem; }
.status { min-height: 1.2em; font-size: .85rem; margin: .25rem 0; }
.status[data-kind=error] { color: #b3261e; }
.status[data-kind=ok] { color: #2e7d32; }
table { border-collapse: collapse; width: 100%; font-size: .85rem; }
th, td { padding: .25rem; text-align: center; border-bottom: 1px solid var(--herald-border); }
th[scope=row] { text-align: left; font-weight: normal; }
fieldset { border: none; margin: 0; padding: 0; min-width: 0; }
.sr { position: absolute; width: 1px; height: 1px; overflow: hidden; clip: rect(0 0 0 0); white-space: nowrap; }
`;

  const BELL =
    '<svg viewBox="0 0 24 24" aria-hidden="true" fill="currentColor"><path d="M12 22a2 2 0 0 0 2-2h-4a2 2 0 0 0 2 2Zm6-6V11a6 6 0 0 0-5-5.9V4a1 1 0 0 0-2 0v1.1A6 6 0 0 0 6 11v5l-2 2v1h16v-1l-2-2Z"/></svg>';

  const STREAM_PATH = '/v1/me/notifications/stream';
  const FIRST_DELAY = 1000;
  const MAX_DELAY = 30000;
  const CAP = 99;
  // How many times a call refused with 429 or 503 is made again (after Retry-After) before it fails.
  const RETRIES_WHEN_BUSY = 3;

  class HttpError extends Error {
    constructor(status, code, message) {
      super(message);
      this.status = status;
      this.code = code;
    }
  }

  function el(tag, props, ...children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(props || {})) {
      if (value === undefined || value === null || value === false) continue;
      if (key === 'class') node.className = value;
      else if (key === 'text') node.textContent = value;
      else if (key === 'dataset') Object.assign(node.dataset, value);
      else if (key.startsWith('on')) node.addEventListener(key.slice(2), value);
      else if (value === true) node.setAttribute(key, '');
      else node.setAttribute(key, String(value));
    }
    for (const child of children.flat()) {
      if (child === undefined || child === null || child === false) continue;
      node.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return node;
  }

  /** An action URL becomes a link only when it is http(s); javascript:, data: and the rest
   * stay text. A path is resolved against the page. */
  function safeHref(url) {
    if (typeof url !== 'string' || url === '' || /[\u0000-\u0020\u007f-\u009f\\]/.test(url)) {
      return null;
    }
    if (url.startsWith('//')) return null;
    let parsed;
    try {
      parsed = new URL(url, window.location.href);
    } catch {
      return null;
    }
    return parsed.protocol === 'https:' || parsed.protocol === 'http:' ? parsed.href : null;
  }

  /** The unread count, read defensively: a number, or 0; `capped` when the server says so. */
  function readCount(data) {
    const raw = data && typeof data === 'object' ? data.count : undefined;
    const number = typeof raw === 'number' ? raw : Number.parseInt(String(raw), 10);
    const count = Number.isFinite(number) && number > 0 ? Math.floor(number) : 0;
    return { count, capped: Boolean(data && data.capped) || count >= CAP };
  }

  function sleep(ms, signal) {
    return new Promise((resolve) => {
      const timer = setTimeout(resolve, ms);
      if (signal) signal.addEventListener('abort', () => { clearTimeout(timer); resolve(); }, { once: true });
    });
  }

  class HeraldInbox extends HTMLElement {
    static get observedAttributes() {
      return ['api', 'token-provider', 'lang', 'push-worker'];
    }

    constructor() {
      super();
      this.attachShadow({ mode: 'open' });
      this._token = null;
      this._tokenPromise = null;
      this._stream = null;
      this._generation = 0;
      this._refreshing = false;
      this._refreshAgain = false;
      this._nextCursor = null;
      this._prefs = null;
      this._count = null;
      this._open = false;
      this._built = false;
    }

    // -- lifecycle -----------------------------------------------------------------------------

    connectedCallback() {
      if (!this._built) this._build();
      this._langObserver = new MutationObserver(() => this._relabel());
      this._langObserver.observe(document.documentElement, { attributes: true, attributeFilter: ['lang'] });
      this.restart();
    }

    disconnectedCallback() {
      this._stop();
      if (this._langObserver) this._langObserver.disconnect();
    }

    attributeChangedCallback(name, before, after) {
      if (!this.isConnected || !this._built || before === after) return;
      if (name === 'lang') this._relabel();
      else this.restart();
    }

    /** Drop the token and everything shown, then start again (e.g. after the host signs in
     * another person). */
    restart() {
      this._stop();
      const generation = ++this._generation;
      this._token = null;
      this._tokenPromise = null;
      this._prefs = null;
      this._nextCursor = null;
      this.$('inbox').replaceChildren();
      this.$('inbox-empty').hidden = true;
      this.$('more').hidden = true;
      this.$('prefs').replaceChildren();
      this.$('prefs-version').textContent = '';
      this._status('inbox-status', '');
      this._status('prefs-status', '');
      this._renderCount(null);
      if (!this.getAttribute('token-provider')) return;
      this._startStream(generation);
      this.refresh();
      this._loadPreferences();
      this._showBrowserPush();
    }

    // -- texts -----------------------------------------------------------------------------------

    get _lang() {
      const holder = this.closest('[lang]');
      const lang = (holder ? holder.getAttribute('lang') : document.documentElement.lang) || 'en';
      return lang.toLowerCase().startsWith('ne') ? 'ne' : 'en';
    }

    get t() {
      return TEXTS[this._lang];
    }

    $(id) {
      return this.shadowRoot.getElementById(id);
    }

    // -- building ----------------------------------------------------------------------------------

    _build() {
      const root = this.shadowRoot;
      if ('adoptedStyleSheets' in root && typeof CSSStyleSheet === 'function' && 'replaceSync' in CSSStyleSheet.prototype) {
        const sheet = new CSSStyleSheet();
        sheet.replaceSync(CSS);
        root.adoptedStyleSheets = [sheet];
      } else {
        root.append(el('style', { text: CSS }));
      }
      const bell = el('button', {
        id: 'bell', type: 'button', class: 'bell', part: 'bell',
        'aria-haspopup': 'dialog', 'aria-expanded': 'false', 'aria-controls': 'panel',
        onclick: () => this.toggle(),
      });
      bell.innerHTML = BELL; // a constant, never server data
      bell.append(el('span', { id: 'badge', class: 'badge', part: 'badge', dataset: { count: '', loading: 'true' }, 'aria-hidden': 'true', text: '…' }));
      const tabs = el('div', { class: 'tabs', role: 'tablist', part: 'tabs', onkeydown: (e) => this._tabKeys(e) },
        el('button', { id: 'tab-inbox', type: 'button', role: 'tab', part: 'tab', 'aria-selected': 'true', 'aria-controls': 'inbox-panel', onclick: () => this._select('inbox') }),
        el('button', { id: 'tab-prefs', type: 'button', role: 'tab', part: 'tab', 'aria-selected': 'false', 'aria-controls': 'prefs-panel', tabindex: '-1', onclick: () => this._select('prefs') }),
      );
      const panel = el('div', { id: 'panel', class: 'panel', part: 'panel', role: 'dialog', 'aria-modal': 'true', 'aria-labelledby': 'title', hidden: true, onkeydown: (e) => this._panelKeys(e) },
        el('div', { class: 'head' },
          el('strong', { id: 'title' }),
          el('span', { id: 'live', class: 'live', dataset: { state: 'off' } }),
          el('button', { id: 'close', type: 'button', part: 'button', onclick: () => this.close() }),
        ),
        tabs,
        el('div', { id: 'inbox-panel', role: 'tabpanel', 'aria-labelledby': 'tab-inbox' },
          el('div', { class: 'head' },
            el('span'),
            el('button', { id: 'mark-all', type: 'button', part: 'button', onclick: () => this.markAllRead() }),
          ),
          el('p', { id: 'inbox-status', class: 'status', part: 'status', role: 'status' }),
          el('ol', { id: 'inbox', part: 'list', 'aria-labelledby': 'tab-inbox' }),
          el('p', { id: 'inbox-empty', class: 'subtle', hidden: true }),
          el('button', { id: 'more', type: 'button', part: 'button', hidden: true, onclick: () => this._loadMore() }),
        ),
        el('div', { id: 'prefs-panel', role: 'tabpanel', 'aria-labelledby': 'tab-prefs', hidden: true, part: 'preferences' },
          el('p', { class: 'subtle' }, el('span', { id: 'prefs-version' })),
          el('fieldset', { id: 'prefs' }),
          el('p', { id: 'prefs-status', class: 'status', part: 'status', role: 'status' }),
          el('p', { id: 'webpush', hidden: true },
            el('label', {},
              el('input', { id: 'webpush-toggle', type: 'checkbox', onchange: (e) => this._toggleBrowserPush(e.currentTarget.checked) }),
              ' ', el('span', { id: 'webpush-label' })),
            ' ', el('span', { id: 'webpush-status', class: 'status', part: 'status', role: 'status' })),
        ),
      );
      // Announced by screen readers when the count changes (the badge itself is aria-hidden).
      const announcer = el('span', { id: 'announce', class: 'sr', role: 'status', 'aria-live': 'polite' });
      root.append(bell, announcer, panel);
      this._built = true;
      this._relabel();
      if (this.hasAttribute('inline')) {
        panel.hidden = false;
        panel.removeAttribute('aria-modal');
        panel.setAttribute('role', 'region');
        this.$('close').hidden = true;
        bell.removeAttribute('aria-haspopup');
      }
    }

    _relabel() {
      const t = this.t;
      this.$('title').textContent = t.notifications;
      this.$('tab-inbox').textContent = t.inbox;
      this.$('tab-prefs').textContent = t.preferences;
      this.$('mark-all').textContent = t.markAllRead;
      this.$('more').textContent = t.more;
      this.$('inbox-empty').textContent = t.empty;
      this.$('close').textContent = t.close;
      this.$('close').setAttribute('aria-label', t.close);
      this._setLive(this.$('live').dataset.state || 'off');
      this._labelBell();
      this.$('webpush-label').textContent = t.browserPush;
      if (this._prefs) this._renderPreferences();
      if (this._prefs) this.$('prefs-version').textContent = t.version(this._prefs.version);
    }

    _labelBell() {
      const count = this._count === null ? 0 : this._count.count;
      this.$('bell').setAttribute('aria-label', `${this.t.notifications}: ${this.t.unread(count)}`);
    }

    // -- the panel, its tabs and keyboard ------------------------------------------------------

    get open() {
      return this.hasAttribute('inline') || this._open;
    }

    toggle() {
      if (this.hasAttribute('inline')) return;
      if (this._open) this.close();
      else this.show();
    }

    show() {
      if (this.hasAttribute('inline')) return;
      this._open = true;
      this.$('panel').hidden = false;
      this.$('bell').setAttribute('aria-expanded', 'true');
      const selected = this.$('tab-inbox').getAttribute('aria-selected') === 'true' ? 'tab-inbox' : 'tab-prefs';
      this.$(selected).focus();
    }

    close() {
      if (this.hasAttribute('inline') || !this._open) return;
      this._open = false;
      this.$('panel').hidden = true;
      this.$('bell').setAttribute('aria-expanded', 'false');
      this.$('bell').focus();
    }

    _focusable() {
      const panel = this.$('panel');
      return [...panel.querySelectorAll('button, a[href], input, [tabindex]')].filter(
        (node) => !node.disabled && node.getAttribute('tabindex') !== '-1' && !node.closest('[hidden]') && node.getClientRects().length > 0,
      );
    }

    _panelKeys(event) {
      if (this.hasAttribute('inline')) return;
      if (event.key === 'Escape') {
        event.preventDefault();
        this.close();
        return;
      }
      if (event.key !== 'Tab') return;
      // The focus trap: Tab and Shift+Tab cycle inside the open panel.
      const nodes = this._focusable();
      if (nodes.length === 0) return;
      const active = this.shadowRoot.activeElement;
      const index = nodes.indexOf(active);
      if (event.shiftKey && (index <= 0)) {
        event.preventDefault();
        nodes[nodes.length - 1].focus();
      } else if (!event.shiftKey && (index === nodes.length - 1 || index < 0)) {
        event.preventDefault();
        nodes[0].focus();
      }
    }

    _select(which) {
      const inbox = which === 'inbox';
      this.$('tab-inbox').setAttribute('aria-selected', String(inbox));
      this.$('tab-prefs').setAttribute('aria-selected', String(!inbox));
      this.$('tab-inbox').tabIndex = inbox ? 0 : -1;
      this.$('tab-prefs').tabIndex = inbox ? -1 : 0;
      this.$('inbox-panel').hidden = !inbox;
      this.$('prefs-panel').hidden = inbox;
    }

    _tabKeys(event) {
      if (!['ArrowLeft', 'ArrowRight', 'Home', 'End'].includes(event.key)) return;
      event.preventDefault();
      const toPrefs = this.$('tab-inbox').getAttribute('aria-selected') === 'true';
      const which = event.key === 'Home' ? 'inbox' : event.key === 'End' ? 'prefs' : toPrefs ? 'prefs' : 'inbox';
      this._select(which);
      this.$(which === 'inbox' ? 'tab-inbox' : 'tab-prefs').focus();
    }

    // -- HTTP ----------------------------------------------------------------------------------------

    get _base() {
      return (this.getAttribute('api') || '').replace(/\/+$/, '');
    }

    async _getToken(fresh) {
      if (fresh) {
        this._token = null;
        this._tokenPromise = null;
      }
      if (this._token) return this._token;
      if (!this._tokenPromise) {
        const name = this.getAttribute('token-provider') || '';
        const provider = window[name];
        if (typeof provider !== 'function') {
          return Promise.reject(new HttpError(0, 'TOKEN_PROVIDER_MISSING', `no global function ${name}`));
        }
        this._tokenPromise = Promise.resolve(provider()).then((token) => {
          if (typeof token !== 'string' || token === '') throw new HttpError(401, 'UNAUTHENTICATED', 'no token');
          this._token = token;
          return token;
        }).finally(() => { this._tokenPromise = null; });
      }
      return this._tokenPromise;
    }

    /** One call to Herald; on a 401, a fresh token from the host and one more try. */
    async _api(path, { method = 'GET', body } = {}) {
      // A 401 asks the host for a fresh token once. A 429 (the person's rate limit) or a 503
      // (a dependency down) was refused without effect, so the call is made again after the
      // server's Retry-After (capped), a few times, before the caller hears of it.
      let refreshed = false;
      for (let waits = 0; ; ) {
        const token = await this._getToken(refreshed);
        const headers = { Accept: 'application/json', Authorization: `Bearer ${token}` };
        if (body !== undefined) headers['Content-Type'] = 'application/json';
        const response = await fetch(this._base + path, {
          method, headers, cache: 'no-store', credentials: 'omit',
          body: body === undefined ? undefined : JSON.stringify(body),
        });
        if (response.status === 401 && !refreshed) { refreshed = true; continue; }
        if ((response.status === 429 || response.status === 503) && waits < RETRIES_WHEN_BUSY) {
          waits += 1;
          const seconds = Number(response.headers.get('Retry-After'));
          const delay = Math.min(Number.isFinite(seconds) && seconds > 0 ? seconds : 1, 10);
          await new Promise((resolve) => setTimeout(resolve, delay * 1000));
          continue;
        }
        const text = await response.text();
        let data = null;
        try { data = text ? JSON.parse(text) : null; } catch { data = null; }
        if (!response.ok) {
          const error = data && data.error ? data.error : {};
          throw new HttpError(response.status, error.code || `HTTP_${response.status}`, error.message || response.statusText);
        }
        return data;
      }
    }

    _status(id, text, kind = '') {
      const node = this.$(id);
      node.textContent = text;
      node.dataset.kind = kind;
    }

    // -- badge and list --------------------------------------------------------------------------

    _renderCount(data) {
      const badge = this.$('badge');
      const previous = this._count;
      this._count = data;
      if (data === null) {
        badge.textContent = '…';
        badge.dataset.count = '';
        badge.classList.remove('zero');
      } else {
        badge.textContent = data.capped ? `${CAP}+` : String(data.count);
        badge.dataset.count = String(data.count);
        badge.classList.toggle('zero', data.count === 0);
        if (!previous || previous.count !== data.count) {
          this.$('announce').textContent = this.t.unread(data.count);
          this.dispatchEvent(new CustomEvent('herald-count', { detail: { count: data.count, capped: data.capped } }));
        }
      }
      this._labelBell();
    }

    /** Refetch the count and the first page; calls meanwhile fold into one more round. */
    async refresh() {
      if (this._refreshing) {
        this._refreshAgain = true;
        return;
      }
      this._refreshing = true;
      this.$('badge').dataset.loading = 'true';
      const size = Math.min(Math.max(Number.parseInt(this.getAttribute('page-size') || '20', 10) || 20, 1), 100);
      try {
        do {
          this._refreshAgain = false;
          const generation = this._generation;
          const [count, page] = await Promise.all([
            this._api('/v1/me/notifications/unread-count'),
            this._api(`/v1/me/notifications?limit=${size}`),
          ]);
          if (generation !== this._generation) {
            this._refreshAgain = true;
            continue;
          }
          this._renderCount(readCount(count));
          const items = Array.isArray(page && page.items) ? page.items : [];
          this.$('inbox').replaceChildren(...items.map((item) => this._renderItem(item)));
          this.$('inbox-empty').hidden = items.length > 0;
          this._nextCursor = page ? page.nextCursor || null : null;
          this.$('more').hidden = !this._nextCursor;
          this._status('inbox-status', '');
        } while (this._refreshAgain);
      } catch (error) {
        this._status('inbox-status', this.t.loadFailed, 'error');
      } finally {
        this._refreshing = false;
        this.$('badge').dataset.loading = 'false';
      }
    }

    async _loadMore() {
      if (!this._nextCursor) return;
      const generation = this._generation;
      const size = Math.min(Math.max(Number.parseInt(this.getAttribute('page-size') || '20', 10) || 20, 1), 100);
      try {
        const page = await this._api(`/v1/me/notifications?limit=${size}&cursor=${encodeURIComponent(this._nextCursor)}`);
        if (generation !== this._generation) return;
        this.$('inbox').append(...(page.items || []).map((item) => this._renderItem(item)));
        this._nextCursor = page.nextCursor || null;
        this.$('more').hidden = !this._nextCursor;
      } catch (error) {
        this._status('inbox-status', this.t.loadFailed, 'error');
      }
    }

    _renderItem(item) {
      const t = this.t;
      const unread = !item.readAt;
      const href = safeHref(item.actionUrl);
      const when = new Date(item.occurredAt);
      const time = Number.isNaN(when.getTime()) ? String(item.occurredAt || '') : when.toLocaleString(this._lang === 'ne' ? 'ne-NP' : undefined);
      return el('li', { class: `item${unread ? ' unread' : ''}`, part: 'item', dataset: { id: item.id, kind: item.kind } },
        el('div', { class: 'item-main' },
          el('div', { class: 'item-title', part: 'item-title', text: item.title || item.kind }),
          item.body ? el('div', { class: 'item-body', part: 'item-body', text: item.body }) : null,
          el('div', { class: 'meta' },
            `${item.category || ''} · ${time}`,
            href ? ' · ' : '',
            href ? el('a', { href, class: 'action', part: 'action', target: '_blank', rel: 'noopener noreferrer', text: t.open }) : null,
          ),
        ),
        unread
          ? el('button', { type: 'button', class: 'mark-read', part: 'button', text: t.markRead, 'aria-label': `${t.markRead}: ${item.title || item.kind}`, onclick: (event) => this.markRead(item.id, event.currentTarget) })
          : el('span', { class: 'read-at subtle', text: t.read }),
      );
    }

    async markRead(id, button) {
      if (button) button.disabled = true;
      // Keep the keyboard user's place: the next item's button, or the list's neighbour.
      const li = button ? button.closest('li') : null;
      const nextId = li && li.nextElementSibling ? li.nextElementSibling.dataset.id : null;
      try {
        await this._api(`/v1/me/notifications/${encodeURIComponent(id)}/read`, { method: 'POST' });
      } catch (error) {
        this._status('inbox-status', error.status === 404 ? this.t.gone : this.t.loadFailed, 'error');
      }
      await this.refresh();
      const target = (nextId && this.$('inbox').querySelector(`li[data-id="${CSS_escape(nextId)}"] button.mark-read`)) || this.$('mark-all');
      if (button && target && this.open) target.focus();
    }

    async markAllRead() {
      let message = this.t.loadFailed;
      let kind = 'error';
      try {
        const answer = await this._api('/v1/me/notifications/read-all', { method: 'POST' });
        message = this.t.markedAll(answer && typeof answer.updated === 'number' ? answer.updated : 0);
        kind = 'ok';
      } catch (error) {
        // reported below
      }
      await this.refresh();
      this._status('inbox-status', message, kind);
    }

    // -- live stream -------------------------------------------------------------------------------

    _setLive(value) {
      const node = this.$('live');
      node.dataset.state = value;
      node.textContent = this.t[value] || value;
    }

    _stop() {
      if (this._stream) this._stream.abort();
      this._stream = null;
      if (this._built) this._setLive('off');
    }

    _startStream(generation) {
      const controller = new AbortController();
      this._stream = controller;
      const { signal } = controller;
      (async () => {
        let delay = FIRST_DELAY;
        let fresh = false; // ask the host for a new token before the next try
        let retried = false; // a fresh token was refused too: signed out
        while (!signal.aborted && generation === this._generation) {
          this._setLive(delay === FIRST_DELAY ? 'connecting' : 'reconnecting');
          try {
            const token = await this._getToken(fresh);
            fresh = false;
            await this._readStream(token, signal, {
              opened: () => {
                delay = FIRST_DELAY;
                retried = false;
                this._setLive('live');
                // Whatever happened while the stream was down: the badge is right again now.
                this.refresh();
              },
              notification: (data) => {
                this.dispatchEvent(new CustomEvent('herald-notification', { detail: data }));
                this.refresh();
              },
            });
          } catch (error) {
            if (signal.aborted) return;
            if (error instanceof HttpError && error.status === 401) {
              if (retried) {
                this._setLive('expired');
                return;
              }
              retried = true;
              fresh = true;
              continue;
            }
          }
          if (signal.aborted) return;
          this._setLive('reconnecting');
          // Backoff with jitter, so many pages do not come back in step after an outage.
          await sleep(delay / 2 + Math.random() * delay / 2, signal);
          delay = Math.min(delay * 2, MAX_DELAY);
        }
      })();
    }

    async _readStream(token, signal, handlers) {
      const response = await fetch(this._base + STREAM_PATH, {
        headers: { Authorization: `Bearer ${token}`, Accept: 'text/event-stream' },
        cache: 'no-store', credentials: 'omit', signal,
      });
      if (!response.ok || !response.body) throw new HttpError(response.status, `HTTP_${response.status}`, 'stream refused');
      const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
      let buffer = '';
      let opened = false;
      for (;;) {
        const { value, done } = await reader.read();
        if (done) return;
        buffer += value;
        let text = buffer;
        let held = '';
        if (text.endsWith('\r')) { held = '\r'; text = text.slice(0, -1); }
        text = text.replace(/\r\n?/g, '\n');
        let end;
        while ((end = text.indexOf('\n\n')) >= 0) {
          const frame = text.slice(0, end);
          text = text.slice(end + 2);
          if (!opened) { opened = true; handlers.opened(); }
          dispatchFrame(frame, handlers);
        }
        buffer = text + held;
      }
    }

    // -- preferences ----------------------------------------------------------------------------------
    //
    // GET answers the global switches, every cell's effective value and the cells the person set
    // (`overrides`, in PUT's shape); PUT replaces the whole set at the version read. A toggled
    // cell becomes an override; a 409 (saved elsewhere meanwhile) reloads and says so.

    async _loadPreferences(message = '', kind = '') {
      const generation = this._generation;
      let view;
      try {
        view = await this._api('/v1/me/preferences');
      } catch (error) {
        this._status('prefs-status', this.t.prefsFailed, 'error');
        return;
      }
      if (generation !== this._generation) return;
      const overrides = new Map();
      for (const o of view.overrides || []) overrides.set(`${o.category}|${o.channel}`, Boolean(o.enabled));
      this._prefs = {
        version: view.version,
        channels: Object.keys(view.channels || {}),
        muted: new Set(Object.entries(view.channels || {}).filter(([, on]) => !on).map(([c]) => c)),
        categories: view.categories || [],
        overrides,
        // {start, end, timezone} or null; sent back as read, so a save keeps them.
        quiet: view.quietHours || null,
      };
      this._renderPreferences();
      this._status('prefs-status', message, kind);
    }

    _renderPreferences() {
      const t = this.t;
      const prefs = this._prefs;
      const label = (c) => t.channels[c] || c;
      const head = el('tr', {}, el('th', { scope: 'col' }), prefs.channels.map((c) => el('th', { scope: 'col', text: label(c) })));
      const globalRow = el('tr', { class: 'global' }, el('th', { scope: 'row', text: t.allCategories }),
        prefs.channels.map((channel) => el('td', {}, el('input', {
          type: 'checkbox', checked: !prefs.muted.has(channel), 'aria-label': t.atAll(label(channel)),
          dataset: { global: channel }, onchange: (e) => this._toggleGlobal(channel, e.currentTarget.checked),
        }))));
      const rows = prefs.categories.map((row) => el('tr', { class: row.locked ? 'locked' : '' },
        el('th', { scope: 'row' }, row.category, row.locked ? el('span', { class: 'subtle', text: ` ${t.locked}`, title: t.lockedTitle }) : null),
        prefs.channels.map((channel) => el('td', {}, el('input', {
          type: 'checkbox', checked: Boolean((row.channels || {})[channel]), disabled: Boolean(row.locked),
          'aria-label': t.by(row.category, label(channel)), dataset: { category: row.category, channel },
          onchange: (e) => this._toggleCell(row.category, channel, e.currentTarget.checked),
        })))));
      // Quiet hours, on the person's own clock: a switch and two times (end before start wraps
      // past midnight). Any change saves the whole set, as a toggled cell does.
      const quiet = prefs.quiet;
      const time = (id, value, text) => el('label', {}, ` ${text} `, el('input', {
        id, type: 'time', value, disabled: !quiet, onchange: () => this._changeQuiet(`#${id}`),
      }));
      const quietRow = el('p', { class: 'quiet', part: 'quiet-hours' },
        el('label', {}, el('input', {
          id: 'quiet-on', type: 'checkbox', checked: Boolean(quiet), onchange: () => this._changeQuiet('#quiet-on'),
        }), ' ', t.quietHours),
        time('quiet-start', quiet ? quiet.start : '21:00', t.quietFrom),
        time('quiet-end', quiet ? quiet.end : '07:00', t.quietUntil),
        el('br'), el('span', { class: 'subtle', text: t.quietHint }));
      this.$('prefs').replaceChildren(el('table', {}, el('thead', {}, head), el('tbody', {}, globalRow, rows)), quietRow);
      this.$('prefs-version').textContent = t.version(prefs.version);
    }

    _changeQuiet(selector) {
      const root = this.$('prefs');
      const on = root.querySelector('#quiet-on').checked;
      const start = root.querySelector('#quiet-start').value;
      const end = root.querySelector('#quiet-end').value;
      const zone = this._prefs.quiet ? this._prefs.quiet.timezone : null;
      this._prefs.quiet = on ? { start, end, ...(zone ? { timezone: zone } : {}) } : null;
      this._savePreferences(selector);
    }

    _toggleGlobal(channel, on) {
      if (on) this._prefs.muted.delete(channel);
      else this._prefs.muted.add(channel);
      this._savePreferences(`[data-global="${channel}"]`);
    }

    _toggleCell(category, channel, on) {
      this._prefs.overrides.set(`${category}|${channel}`, on);
      this._savePreferences(`[data-category="${category}"][data-channel="${channel}"]`);
    }

    async _savePreferences(selector) {
      const prefs = this._prefs;
      if (!prefs) return;
      const body = {
        version: prefs.version,
        channels: Object.fromEntries([...prefs.muted].map((c) => [c, false])),
        overrides: [...prefs.overrides].map(([key, enabled]) => {
          const [category, channel] = key.split('|');
          return { category, channel, enabled };
        }),
        quietHours: prefs.quiet,
      };
      const fieldset = this.$('prefs');
      fieldset.disabled = true;
      this._status('prefs-status', this.t.saving);
      try {
        const saved = await this._api('/v1/me/preferences', { method: 'PUT', body });
        await this._loadPreferences(this.t.saved(saved.version), 'ok');
      } catch (error) {
        if (error instanceof HttpError && error.status === 409) await this._loadPreferences(this.t.conflict, 'error');
        else await this._loadPreferences(`${this.t.notSaved} ${error.code || ''}`.trim(), 'error');
      } finally {
        fieldset.disabled = false;
        // The matrix was redrawn: give the keyboard its place back.
        const again = selector ? fieldset.querySelector(`input${selector}`) : null;
        if (again && this.open) again.focus();
      }
    }

    // -- browser notifications (Web Push) ---------------------------------------------------------
    //
    // Opt-in twice: the host names its service worker (`push-worker`), and the person turns the
    // switch on, which asks the browser's permission. On: subscribe with Herald's VAPID key and
    // register the subscription as a device. Off: remove the device, then unsubscribe. The
    // device id is kept in localStorage beside the endpoint it was registered for.

    get _pushSupported() {
      return Boolean(this.getAttribute('push-worker')) && window.isSecureContext &&
        'serviceWorker' in navigator && 'PushManager' in window && 'Notification' in window;
    }

    async _pushRegistration() {
      return navigator.serviceWorker.register(this.getAttribute('push-worker'));
    }

    async _showBrowserPush() {
      const row = this.$('webpush');
      row.hidden = !this.getAttribute('push-worker');
      if (row.hidden) return;
      const toggle = this.$('webpush-toggle');
      if (!this._pushSupported) {
        toggle.checked = false;
        toggle.disabled = true;
        this._status('webpush-status', this.t.pushUnsupported);
        return;
      }
      toggle.disabled = false;
      let on = false;
      try {
        const registration = await navigator.serviceWorker.getRegistration(this.getAttribute('push-worker'));
        const subscription = registration ? await registration.pushManager.getSubscription() : null;
        const kept = JSON.parse(localStorage.getItem(PUSH_STORE) || 'null');
        on = Boolean(subscription && kept && kept.endpoint === subscription.endpoint) && Notification.permission === 'granted';
      } catch { on = false; }
      toggle.checked = on;
      this._status('webpush-status', on ? this.t.pushOn : (Notification.permission === 'denied' ? this.t.pushBlocked : this.t.pushOff));
    }

    async _toggleBrowserPush(on) {
      const toggle = this.$('webpush-toggle');
      toggle.disabled = true;
      this._status('webpush-status', this.t.pushWorking);
      try {
        if (on) await this._subscribeBrowser();
        else await this._unsubscribeBrowser();
        this._status('webpush-status', on ? this.t.pushOn : this.t.pushOff, 'ok');
      } catch (error) {
        toggle.checked = !on;
        const blocked = error && error.name === 'NotAllowedError';
        const reason = error && typeof error.code === 'string' ? error.code : (error && error.name) || '';
        this._status('webpush-status', blocked ? this.t.pushBlocked : `${this.t.pushFailed} ${reason}`.trim(), 'error');
        this.dispatchEvent(new CustomEvent('herald-push-error', { detail: { name: error && error.name, code: error && error.code, message: error && error.message } }));
      } finally {
        toggle.disabled = false;
      }
    }

    async _subscribeBrowser() {
      if (await Notification.requestPermission() !== 'granted') {
        const error = new Error('permission not granted');
        error.name = 'NotAllowedError';
        throw error;
      }
      const registration = await this._pushRegistration();
      await withinTime(navigator.serviceWorker.ready);
      const { publicKey } = await this._api('/v1/webpush/vapid-public-key');
      // The browser's push service may be out of reach (a network that blocks it): the switch
      // says so after a while rather than asking for ever.
      const subscription = await registration.pushManager.getSubscription() ||
        await withinTime(registration.pushManager.subscribe({ userVisibleOnly: true, applicationServerKey: base64UrlBytes(publicKey) }));
      const json = subscription.toJSON();
      const device = await this._api('/v1/me/devices', {
        method: 'POST', body: { platform: 'webpush', endpoint: json.endpoint, keys: json.keys },
      });
      localStorage.setItem(PUSH_STORE, JSON.stringify({ id: device.id, endpoint: json.endpoint }));
    }

    async _unsubscribeBrowser() {
      const kept = JSON.parse(localStorage.getItem(PUSH_STORE) || 'null');
      if (kept && kept.id) {
        try {
          await this._api(`/v1/me/devices/${encodeURIComponent(kept.id)}`, { method: 'DELETE' });
        } catch (error) {
          if (!(error instanceof HttpError && error.status === 404)) throw error;
        }
      }
      localStorage.removeItem(PUSH_STORE);
      const registration = await navigator.serviceWorker.getRegistration(this.getAttribute('push-worker'));
      const subscription = registration ? await registration.pushManager.getSubscription() : null;
      if (subscription) await subscription.unsubscribe();
    }
  }

  const PUSH_STORE = 'herald-webpush-device';
  const PUSH_WAIT_MS = 20000;

  function withinTime(promise) {
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        const error = new Error('the browser did not answer');
        error.name = 'TimeoutError';
        reject(error);
      }, PUSH_WAIT_MS);
      promise.then((value) => { clearTimeout(timer); resolve(value); }, (error) => { clearTimeout(timer); reject(error); });
    });
  }

  function base64UrlBytes(value) {
    const padded = value.replace(/-/g, '+').replace(/_/g, '/') + '='.repeat((4 - (value.length % 4)) % 4);
    const raw = atob(padded);
    return Uint8Array.from(raw, (c) => c.charCodeAt(0));
  }

  function CSS_escape(value) {
    return window.CSS && window.CSS.escape ? window.CSS.escape(value) : String(value).replace(/["\\]/g, '\\$&');
  }

  function dispatchFrame(frame, handlers) {
    let event = 'message';
    const data = [];
    for (const line of frame.split('\n')) {
      if (line === '' || line.startsWith(':')) continue;
      const colon = line.indexOf(':');
      const field = colon < 0 ? line : line.slice(0, colon);
      let value = colon < 0 ? '' : line.slice(colon + 1);
      if (value.startsWith(' ')) value = value.slice(1);
      if (field === 'event') event = value;
      else if (field === 'data') data.push(value);
    }
    if (event !== 'notification' || data.length === 0) return;
    let payload = null;
    try { payload = JSON.parse(data.join('\n')); } catch { payload = null; }
    handlers.notification(payload);
  }

  HeraldInbox.safeHref = safeHref;
  HeraldInbox.readCount = readCount;
  window.customElements.define('herald-inbox', HeraldInbox);
})();
