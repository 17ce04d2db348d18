// The demo page: one demo person's inbox, unread badge, live stream and preferences.
//
// The live stream is read with fetch() and a ReadableStream rather than EventSource, because
// EventSource cannot send the Authorization header the stream route requires. A stream event
// carries no title or body (it is only a hint), so every `notification` event refetches the
// badge and the list from the API, which is the truth. Nothing here polls: when the badge moves
// without a reload, the live stream moved it.

import {
  api,
  ApiError,
  CHANNEL_LABELS,
  describeError,
  el,
  formatTime,
  setStatus,
  sleep,
} from './common.js';

const $ = (id) => document.getElementById(id);
const PAGE_SIZE = 20;
const STREAM_PATH = '/v1/me/notifications/stream';

const state = {
  people: [],
  config: null,
  session: null, // {externalId, role, name, token}
  generation: 0, // bumped whenever the person changes; stale answers are dropped
  stream: null, // AbortController of the open stream
  nextCursor: null,
  refreshing: false,
  refreshAgain: false,
  prefs: null,
};

// ------------------------------------------------------------------------------------------
// Boot and the person picker

async function boot() {
  try {
    const [people, config] = await Promise.all([api('/dev/people'), api('/dev/config')]);
    state.people = people.people;
    state.defaultKey = identityKey(people.defaultExternalId, people.defaultRole);
    state.config = config;
    fillPicker(people.people);
    fillSendForm(config);
  } catch (error) {
    setStatus($('boot-status'), `Could not load the demo school: ${describeError(error)}`, 'error');
    return;
  }
  $('person').addEventListener('change', () => {
    const value = $('person').value;
    if (value) location.hash = value;
  });
  window.addEventListener('hashchange', openFromHash);
  $('mark-all').addEventListener('click', markAllRead);
  $('more').addEventListener('click', loadMore);
  $('send-form').addEventListener('submit', sendAnnouncement);
  openFromHash();
}

function identityKey(externalId, role) {
  return `${encodeURIComponent(externalId)}/${encodeURIComponent(role)}`;
}

function fillPicker(people) {
  const select = $('person');
  select.replaceChildren();
  const groups = new Map();
  for (const person of people) {
    if (!groups.has(person.roleName)) {
      const group = el('optgroup', { label: `${person.roleName}s` });
      groups.set(person.roleName, group);
      select.append(group);
    }
    groups.get(person.roleName).append(
      el('option', {
        value: identityKey(person.externalId, person.role),
        text: `${person.name} — ${person.description}`,
      }),
    );
  }
  select.disabled = false;
}

function findIdentity(key) {
  return state.people.find((p) => identityKey(p.externalId, p.role) === key) || null;
}

function openFromHash() {
  let key = location.hash.replace(/^#/, '');
  if (!findIdentity(key)) {
    key = state.defaultKey;
    history.replaceState(null, '', `#${key}`);
  }
  const identity = findIdentity(key);
  if (!identity) return;
  $('person').value = key;
  openSession(identity);
}

async function openSession(identity) {
  const generation = ++state.generation;
  stopStream();
  state.session = null;
  state.prefs = null;
  $('workspace').hidden = false;
  $('inbox').replaceChildren();
  $('live-log').replaceChildren();
  $('inbox-empty').hidden = true;
  $('more').hidden = true;
  $('prefs').replaceChildren();
  $('prefs-version').textContent = '';
  renderBadge(null);
  setStatus($('inbox-status'), '');
  setStatus($('prefs-status'), '');
  $('person-detail').textContent =
    `${identity.description} · role ${identity.role} · reachable by ` +
    `${['in-app', ...identity.reachable].join(', ')}`;
  let answer;
  try {
    answer = await api('/dev/token', {
      method: 'POST',
      body: { externalId: identity.externalId, role: identity.role },
    });
  } catch (error) {
    setStatus($('inbox-status'), `Could not sign in: ${describeError(error)}`, 'error');
    return;
  }
  if (generation !== state.generation) return;
  state.session = { ...identity, token: answer.token };
  document.title = `${identity.name} · Herald demo`;
  startStream(generation);
  refreshInbox();
  loadPreferences();
}

// ------------------------------------------------------------------------------------------
// Inbox and badge

// The server counts unread items up to a cap (`capped`: at least that many); past it, "99+".
function renderBadge(count, capped = false) {
  const badge = $('badge');
  const shown = count === null ? '…' : capped ? '99+' : String(count);
  badge.textContent = shown;
  badge.dataset.count = count === null ? '' : String(count);
  badge.classList.toggle('zero', count === 0);
  if (state.session && count !== null) {
    document.title = `${count ? `(${shown}) ` : ''}${state.session.name} · Herald demo`;
  }
}

/** Refetch the badge and the first page; calls that arrive meanwhile fold into one more round. */
async function refreshInbox() {
  if (state.refreshing) {
    state.refreshAgain = true;
    return;
  }
  state.refreshing = true;
  $('badge').dataset.loading = 'true';
  try {
    do {
      state.refreshAgain = false;
      const session = state.session;
      if (!session) break;
      const [count, page] = await Promise.all([
        api('/v1/me/notifications/unread-count', { token: session.token }),
        api(`/v1/me/notifications?limit=${PAGE_SIZE}`, { token: session.token }),
      ]);
      if (session !== state.session) {
        state.refreshAgain = true; // the person changed meanwhile: fetch again for the new one
        continue;
      }
      renderBadge(count.count, count.capped);
      $('inbox').replaceChildren(...page.items.map(renderItem));
      $('inbox-empty').hidden = page.items.length > 0;
      state.nextCursor = page.nextCursor;
      $('more').hidden = !page.nextCursor;
      setStatus($('inbox-status'), '');
    } while (state.refreshAgain);
  } catch (error) {
    setStatus($('inbox-status'), `Could not load the inbox: ${describeError(error)}`, 'error');
  } finally {
    state.refreshing = false;
    $('badge').dataset.loading = 'false';
  }
}

async function loadMore() {
  const session = state.session;
  if (!session || !state.nextCursor) return;
  try {
    const cursor = encodeURIComponent(state.nextCursor);
    const page = await api(`/v1/me/notifications?limit=${PAGE_SIZE}&cursor=${cursor}`, {
      token: session.token,
    });
    if (session !== state.session) return;
    $('inbox').append(...page.items.map(renderItem));
    state.nextCursor = page.nextCursor;
    $('more').hidden = !page.nextCursor;
  } catch (error) {
    setStatus($('inbox-status'), `Could not load more: ${describeError(error)}`, 'error');
  }
}

/** Only a path on this site or an https URL becomes a link; anything else stays text. */
function safeHref(url) {
  if (typeof url !== 'string') return null;
  if (url.startsWith('/') && !url.startsWith('//')) return url;
  return /^https:\/\//i.test(url) ? url : null;
}

function renderItem(item) {
  const unread = !item.readAt;
  const href = safeHref(item.actionUrl);
  return el(
    'li',
    { class: `item${unread ? ' unread' : ''}`, dataset: { id: item.id, kind: item.kind } },
    el(
      'div',
      { class: 'item-main' },
      el('div', { class: 'item-title', text: item.title || item.kind }),
      item.body ? el('div', { class: 'item-body', text: item.body }) : null,
      el(
        'div',
        { class: 'item-meta' },
        el('span', { class: `chip ${item.priority}`, text: item.category }),
        ` ${formatTime(item.occurredAt)}`,
        item.priority !== 'normal' ? ` · ${item.priority}` : '',
        href ? ' · ' : '',
        href ? el('a', { href, rel: 'noopener noreferrer', text: 'open' }) : null,
      ),
    ),
    unread
      ? el('button', {
          type: 'button',
          class: 'mark-read secondary',
          text: 'Mark read',
          onclick: (event) => markRead(item.id, event.currentTarget),
        })
      : el('span', { class: 'read-at subtle', text: 'read' }),
  );
}

async function markRead(id, button) {
  const session = state.session;
  if (!session) return;
  button.disabled = true;
  try {
    await api(`/v1/me/notifications/${encodeURIComponent(id)}/read`, {
      method: 'POST',
      token: session.token,
    });
  } catch (error) {
    const gone = error instanceof ApiError && error.status === 404;
    setStatus(
      $('inbox-status'),
      gone ? 'That notification is no longer visible to this person.' : describeError(error),
      'error',
    );
  }
  refreshInbox();
}

async function markAllRead() {
  const session = state.session;
  if (!session) return;
  try {
    const answer = await api('/v1/me/notifications/read-all', {
      method: 'POST',
      token: session.token,
    });
    setStatus($('inbox-status'), `Marked ${answer.updated} read.`, 'ok');
  } catch (error) {
    setStatus($('inbox-status'), describeError(error), 'error');
  }
  refreshInbox();
}

// ------------------------------------------------------------------------------------------
// The live stream (Server-Sent Events over fetch)

function setLive(value) {
  const node = $('live');
  node.dataset.state = value;
  node.textContent = {
    live: 'live',
    connecting: 'connecting…',
    reconnecting: 'reconnecting…',
    expired: 'signed out',
    off: 'offline',
  }[value];
}

function stopStream() {
  if (state.stream) state.stream.abort();
  state.stream = null;
  setLive('off');
}

function startStream(generation) {
  const controller = new AbortController();
  state.stream = controller;
  const { signal } = controller;
  (async () => {
    let delay = 1000;
    while (!signal.aborted && generation === state.generation && state.session) {
      setLive('connecting');
      try {
        await readStream(state.session.token, signal, {
          opened() {
            delay = 1000;
            setLive('live');
            // Anything that arrived before the subscription is caught by a refetch.
            refreshInbox();
          },
          notification(data) {
            logLive(data);
            refreshInbox();
          },
        });
      } catch (error) {
        if (signal.aborted) return;
        if (error instanceof ApiError && error.status === 401) {
          setLive('expired');
          setStatus($('inbox-status'), 'The token expired: pick the person again.', 'error');
          return;
        }
      }
      if (signal.aborted) return;
      setLive('reconnecting');
      await sleep(delay, signal);
      delay = Math.min(delay * 2, 15000);
    }
  })();
}

/** Read one SSE response to its end, calling handlers.opened() on its first frame and
 * handlers.notification(data) for every `notification` event. */
async function readStream(token, signal, handlers) {
  const response = await fetch(STREAM_PATH, {
    headers: { Authorization: `Bearer ${token}`, Accept: 'text/event-stream' },
    cache: 'no-store',
    signal,
  });
  if (!response.ok || !response.body) {
    throw new ApiError(response.status, `HTTP_${response.status}`, 'the stream was refused');
  }
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = '';
  let opened = false;
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += value;
    // Lines end in CRLF, LF or CR. A CR at the very end may be half of a CRLF: keep it back.
    let text = buffer;
    let held = '';
    if (text.endsWith('\r')) {
      held = '\r';
      text = text.slice(0, -1);
    }
    text = text.replace(/\r\n?/g, '\n');
    let end;
    while ((end = text.indexOf('\n\n')) >= 0) {
      const frame = text.slice(0, end);
      text = text.slice(end + 2);
      if (!opened) {
        opened = true;
        handlers.opened();
      }
      dispatchFrame(frame, handlers);
    }
    buffer = text + held;
  }
}

function dispatchFrame(frame, handlers) {
  let event = 'message';
  const data = [];
  for (const line of frame.split('\n')) {
    if (line === '' || line.startsWith(':')) continue; // a comment: keep-alive or "subscribed"
    const colon = line.indexOf(':');
    const field = colon < 0 ? line : line.slice(0, colon);
    let value = colon < 0 ? '' : line.slice(colon + 1);
    if (value.startsWith(' ')) value = value.slice(1);
    if (field === 'event') event = value;
    else if (field === 'data') data.push(value);
  }
  if (event !== 'notification' || data.length === 0) return;
  let payload = null;
  try {
    payload = JSON.parse(data.join('\n'));
  } catch {
    payload = null;
  }
  handlers.notification(payload);
}

function logLive(payload) {
  const log = $('live-log');
  const when = new Date().toLocaleTimeString();
  const what = payload ? `${payload.kind} (${payload.category}, ${payload.priority})` : 'notification';
  log.prepend(el('li', { text: `${when} — ${what}` }));
  while (log.children.length > 20) log.lastElementChild.remove();
}

// ------------------------------------------------------------------------------------------
// Preferences
//
// GET answers the global switches and every cell's EFFECTIVE value; PUT replaces the whole set
// with mutes and overrides, and "left out" means the default. So the page keeps what the person
// said — the muted channels, and the cells that differ from what the mutes and the code defaults
// would give — and sends exactly that. A cell set back to its baseline is no override at all,
// so muting a channel later still silences it.

function baseline(prefs, category, channel) {
  if (prefs.muted.has(channel)) return false;
  const defaults = state.config.preferenceDefaults[category] || {};
  return Boolean(defaults[channel]);
}

function effective(prefs, category, channel) {
  if (prefs.locked.has(category)) return true;
  const key = `${category}|${channel}`;
  return prefs.overrides.has(key) ? prefs.overrides.get(key) : baseline(prefs, category, channel);
}

async function loadPreferences(message = '', kind = '') {
  const session = state.session;
  if (!session) return;
  let view;
  try {
    view = await api('/v1/me/preferences', { token: session.token });
  } catch (error) {
    setStatus($('prefs-status'), `Could not load preferences: ${describeError(error)}`, 'error');
    return;
  }
  if (session !== state.session) return;
  const prefs = {
    version: view.version,
    channels: Object.keys(view.channels),
    categories: view.categories.map((c) => c.category),
    muted: new Set(Object.entries(view.channels).filter(([, on]) => !on).map(([c]) => c)),
    locked: new Set(view.categories.filter((c) => c.locked).map((c) => c.category)),
    overrides: new Map(),
  };
  for (const row of view.categories) {
    if (row.locked) continue;
    for (const [channel, on] of Object.entries(row.channels)) {
      if (on !== baseline(prefs, row.category, channel)) {
        prefs.overrides.set(`${row.category}|${channel}`, on);
      }
    }
  }
  state.prefs = prefs;
  renderPreferences();
  setStatus($('prefs-status'), message, kind);
}

function renderPreferences() {
  const prefs = state.prefs;
  const head = el(
    'tr',
    {},
    el('th', { scope: 'col', text: '' }),
    prefs.channels.map((c) => el('th', { scope: 'col', text: CHANNEL_LABELS[c] || c })),
  );
  const globalRow = el(
    'tr',
    { class: 'global' },
    el('th', { scope: 'row', text: 'All categories' }),
    prefs.channels.map((channel) =>
      el(
        'td',
        {},
        el('input', {
          type: 'checkbox',
          checked: !prefs.muted.has(channel),
          'aria-label': `${CHANNEL_LABELS[channel] || channel} at all`,
          dataset: { global: channel },
          onchange: (event) => toggleGlobal(channel, event.currentTarget.checked),
        }),
      ),
    ),
  );
  const rows = prefs.categories.map((category) => {
    const locked = prefs.locked.has(category);
    return el(
      'tr',
      { class: locked ? 'locked' : '' },
      el(
        'th',
        { scope: 'row' },
        category,
        locked ? el('span', { class: 'lock', text: ' locked', title: 'always delivered' }) : null,
      ),
      prefs.channels.map((channel) =>
        el(
          'td',
          {},
          el('input', {
            type: 'checkbox',
            checked: effective(prefs, category, channel),
            disabled: locked,
            'aria-label': `${category} by ${CHANNEL_LABELS[channel] || channel}`,
            dataset: { category, channel },
            onchange: (event) => toggleCell(category, channel, event.currentTarget.checked),
          }),
        ),
      ),
    );
  });
  $('prefs').replaceChildren(
    el('table', { class: 'matrix' }, el('thead', {}, head), el('tbody', {}, globalRow, rows)),
  );
  $('prefs-version').textContent = `version ${prefs.version}`;
}

function toggleGlobal(channel, on) {
  if (on) state.prefs.muted.delete(channel);
  else state.prefs.muted.add(channel);
  savePreferences();
}

function toggleCell(category, channel, on) {
  const key = `${category}|${channel}`;
  if (on === baseline(state.prefs, category, channel)) state.prefs.overrides.delete(key);
  else state.prefs.overrides.set(key, on);
  savePreferences();
}

async function savePreferences() {
  const session = state.session;
  const prefs = state.prefs;
  if (!session || !prefs) return;
  const body = {
    version: prefs.version,
    channels: Object.fromEntries([...prefs.muted].map((c) => [c, false])),
    overrides: [...prefs.overrides].map(([key, enabled]) => {
      const [category, channel] = key.split('|');
      return { category, channel, enabled };
    }),
  };
  $('prefs').disabled = true;
  setStatus($('prefs-status'), 'Saving…');
  try {
    const saved = await api('/v1/me/preferences', { method: 'PUT', token: session.token, body });
    await loadPreferences(`Saved (version ${saved.version}).`, 'ok');
  } catch (error) {
    if (error instanceof ApiError && error.status === 409) {
      await loadPreferences(
        'These preferences were changed elsewhere meanwhile, so nothing was saved. ' +
          'The current ones are shown again: make your change once more.',
        'error',
      );
    } else {
      await loadPreferences(`Not saved: ${describeError(error)}`, 'error');
    }
  } finally {
    $('prefs').disabled = false;
  }
}

// ------------------------------------------------------------------------------------------
// Sending a test announcement (dev API key: herald dev only)

function fillSendForm(config) {
  const audience = $('send-audience');
  for (const group of config.groups) {
    audience.append(
      el('option', { value: `guardians_of_group:${group.id}`, text: `Guardians of ${group.name}` }),
    );
  }
  for (const group of config.groups) {
    audience.append(el('option', { value: `group:${group.id}`, text: `Students of ${group.name}` }));
  }
  audience.append(el('option', { value: 'all_users:', text: 'Everyone in the school' }));
  const channels = $('send-channels');
  for (const channel of config.channels) {
    channels.append(
      el(
        'label',
        { class: 'inline' },
        el('input', { type: 'checkbox', name: 'channel', value: channel, checked: true }),
        ` ${CHANNEL_LABELS[channel] || channel}`,
      ),
    );
  }
}

async function sendAnnouncement(event) {
  event.preventDefault();
  const status = $('send-status');
  const title = $('send-title').value.trim();
  const message = $('send-message').value.trim();
  const channels = [...$('send-channels').querySelectorAll('input:checked')].map((i) => i.value);
  if (!title || !message) {
    setStatus(status, 'A title and a message, please.', 'error');
    return;
  }
  if (channels.length === 0) {
    setStatus(status, 'Pick at least one channel.', 'error');
    return;
  }
  const [kind, group] = $('send-audience').value.split(':');
  const audience = kind === 'all_users' ? { kind } : { kind, groupIds: [group] };
  const button = $('send-button');
  button.disabled = true;
  setStatus(status, 'Sending…');
  try {
    const answer = await api('/v1/events', {
      method: 'POST',
      token: state.config.apiKey,
      body: {
        kind: 'announcement.posted',
        audience,
        channels,
        variables: { title, message },
      },
    });
    // No refresh here on purpose: the live stream is what moves the badge.
    setStatus(
      status,
      answer.created
        ? `Recorded event ${answer.id}. Watch the badge of anyone in the audience.`
        : `Folded into the identical earlier event ${answer.id}: change the title to send another.`,
      'ok',
    );
  } catch (error) {
    setStatus(status, `Not sent: ${describeError(error)}`, 'error');
  } finally {
    button.disabled = false;
  }
}

boot();
