// The demo page: pick a demo person, and watch their inbox in Herald's own <herald-inbox>
// element (served by the API at /v1/widget/herald-inbox.js): unread badge kept live over the
// stream, mark read, preferences. The page's part is the picker, the token provider the element
// calls (POST /dev/token for the person picked), a log of the element's live events and the
// test-announcement form. Nothing here polls: when the badge moves without a reload, the live
// stream moved it.

import { api, CHANNEL_LABELS, describeError, el, setStatus } from './common.js';

const $ = (id) => document.getElementById(id);

const state = {
  people: [],
  config: null,
  identity: null, // the person picked: {externalId, role, name, …}
};

// The element asks for a token at start and again after a 401: sign in the person picked.
window.heraldDemoToken = async () => {
  const identity = state.identity;
  if (!identity) throw new Error('no person picked');
  const answer = await api('/dev/token', {
    method: 'POST',
    body: { externalId: identity.externalId, role: identity.role },
  });
  return answer.token;
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
  const widget = $('inbox-widget');
  widget.addEventListener('herald-notification', (event) => logLive(event.detail));
  widget.addEventListener('herald-count', (event) => {
    if (state.identity) {
      const count = event.detail.count;
      document.title = `${count ? `(${count}) ` : ''}${state.identity.name} · Herald demo`;
    }
  });
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

function openSession(identity) {
  state.identity = identity;
  $('workspace').hidden = false;
  $('live-log').replaceChildren();
  $('person-detail').textContent =
    `${identity.description} · role ${identity.role} · reachable by ` +
    `${['in-app', ...identity.reachable].join(', ')}`;
  document.title = `${identity.name} · Herald demo`;
  const widget = $('inbox-widget');
  if (widget.getAttribute('token-provider') === 'heraldDemoToken') widget.restart();
  else widget.setAttribute('token-provider', 'heraldDemoToken'); // starts it
}

function logLive(payload) {
  const log = $('live-log');
  const when = new Date().toLocaleTimeString();
  const what = payload ? `${payload.kind} (${payload.category}, ${payload.priority})` : 'notification';
  log.prepend(el('li', { text: `${when} — ${what}` }));
  while (log.children.length > 20) log.lastElementChild.remove();
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
