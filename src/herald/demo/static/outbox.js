// The outbox page: what the mock providers recorded, per channel, newest first.
//
// Text goes on the page as text. The email's HTML part and Telegram's HTML body are shown in
// iframes with sandbox="" and srcdoc: an opaque origin where no script runs and nothing can
// reach this page, whatever a template or a variable put in them.

import { api, CHANNEL_LABELS, describeError, el, setStatus } from './common.js';

const $ = (id) => document.getElementById(id);
const REFRESH_MS = 2000;
// Messages drawn per channel until the reader asks for all (each email is a frame).
const SHOWN = 24;
const expanded = new Set();
const PREVIEW_STYLE =
  '<style>body{font:14px/1.45 system-ui,sans-serif;margin:10px;color:#1f2328;' +
  'white-space:pre-wrap;word-wrap:break-word}</style>';

let signature = null;

function previewFrame(label, html, wrap) {
  const frame = el('iframe', {
    class: 'preview',
    sandbox: true, // the empty attribute: every restriction on
    referrerpolicy: 'no-referrer',
    title: label,
  });
  frame.srcdoc = wrap ? `<!doctype html><meta charset="utf-8">${PREVIEW_STYLE}${html}` : html;
  return frame;
}

function field(name, value) {
  if (value === null || value === undefined || value === '') return null;
  return el('div', { class: 'field' }, el('span', { class: 'label', text: name }), el('span', { text: value }));
}

function renderMessage(message) {
  const parts = [
    el(
      'div',
      { class: 'message-head' },
      field('from', message.sender),
      field('to', message.to),
      field('kind', message.kind),
      message.priority !== 'normal' ? field('priority', message.priority) : null,
      field('platform', message.platform),
      field('link', message.actionUrl),
    ),
  ];
  if (message.title) parts.push(el('div', { class: 'message-title', text: message.title }));
  if (message.channel === 'email') {
    if (message.bodyHtml) parts.push(previewFrame(`Email: ${message.title || ''}`, message.bodyHtml, false));
    parts.push(
      el(
        'details',
        { class: 'source', open: !message.bodyHtml },
        el('summary', { text: 'Plain-text part' }),
        el('pre', { class: 'body', text: message.body }),
      ),
    );
  } else if (message.channel === 'telegram') {
    parts.push(previewFrame('Telegram message', message.body, true));
    parts.push(
      el(
        'details',
        { class: 'source' },
        el('summary', { text: 'Telegram HTML source' }),
        el('pre', { class: 'body', text: message.body }),
      ),
    );
  } else {
    parts.push(el('pre', { class: 'body', text: message.body }));
    if (message.channel === 'sms') {
      parts.push(el('div', { class: 'subtle small', text: `${[...message.body].length} characters` }));
    }
  }
  return el('article', { class: `message ${message.channel}`, dataset: { channel: message.channel } }, parts);
}

function renderChannel(channel) {
  const label = CHANNEL_LABELS[channel.channel] || channel.channel;
  let content;
  if (!channel.recording) {
    content = el('p', {
      class: 'empty',
      text: `${label} goes through the real "${channel.provider}" provider here, so nothing is recorded.`,
    });
  } else if (channel.messages.length === 0) {
    content = el('p', {
      class: 'empty',
      text: 'Nothing recorded yet. Send an announcement from the demo page.',
    });
  } else {
    const all = expanded.has(channel.channel);
    const shown = all ? channel.messages : channel.messages.slice(0, SHOWN);
    const hidden = channel.messages.length - shown.length;
    content = el(
      'div',
      {},
      el('div', { class: 'messages' }, shown.map(renderMessage)),
      hidden > 0
        ? el('button', {
            type: 'button',
            class: 'secondary more',
            text: `Show ${hidden} older`,
            onclick: () => {
              expanded.add(channel.channel);
              signature = null;
              refresh();
            },
          })
        : null,
    );
  }
  return el(
    'section',
    { class: 'card channel', id: `channel-${channel.channel}`, dataset: { channel: channel.channel } },
    el(
      'h2',
      {},
      label,
      ' ',
      el('span', { class: 'count', text: String(channel.messages.length) }),
      el('span', { class: 'subtle small', text: ` provider: ${channel.provider}` }),
    ),
    content,
  );
}

function signatureOf(outbox) {
  return JSON.stringify(
    outbox.channels.map((c) => {
      const first = c.messages[0];
      return [c.channel, c.messages.length, first ? [first.to, first.title, first.body] : null];
    }),
  );
}

async function refresh() {
  let outbox;
  try {
    outbox = await api('/dev/outbox');
  } catch (error) {
    setStatus($('outbox-status'), `Could not read the outbox: ${describeError(error)}`, 'error');
    return;
  }
  setStatus($('outbox-status'), '');
  const next = signatureOf(outbox);
  if (next === signature) return; // unchanged: keep the frames (and the reader's scroll) as they are
  signature = next;
  $('tabs').replaceChildren(
    ...outbox.channels.map((c) =>
      el('a', { href: `#channel-${c.channel}` }, CHANNEL_LABELS[c.channel] || c.channel, ' ', el('span', { class: 'count', text: String(c.messages.length) })),
    ),
  );
  $('channels').replaceChildren(...outbox.channels.map(renderChannel));
}

let timer = null;

function schedule() {
  clearInterval(timer);
  timer = $('auto').checked ? setInterval(refresh, REFRESH_MS) : null;
}

$('refresh').addEventListener('click', refresh);
$('auto').addEventListener('change', schedule);
refresh();
schedule();
