// Shared helpers of the demo pages. Everything that comes from the server is put on the page as
// text (textContent, attributes) — never parsed as HTML — except the email and Telegram
// previews, which go into iframes with sandbox="" (no script, an opaque origin).

/** Build an element. Props: class, text, dataset, on<event>; anything else is an attribute. */
export function el(tag, props = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(props)) {
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

/** An answer other than 2xx, with Herald's error code when the body carried one. */
export class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

/** Call the API: JSON in, JSON out; a bearer credential when given. */
export async function api(path, { method = 'GET', token, body, signal } = {}) {
  const headers = { Accept: 'application/json' };
  if (token) headers.Authorization = `Bearer ${token}`;
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  const response = await fetch(path, {
    method,
    headers,
    body: body === undefined ? undefined : JSON.stringify(body),
    signal,
    cache: 'no-store',
  });
  const text = await response.text();
  let data = null;
  if (text) {
    try {
      data = JSON.parse(text);
    } catch {
      data = null;
    }
  }
  if (!response.ok) {
    const error = data && data.error ? data.error : null;
    throw new ApiError(
      response.status,
      error ? error.code : `HTTP_${response.status}`,
      error ? error.message : response.statusText || 'request failed',
    );
  }
  return data;
}

/** A describable message for a failure of `api()` or of the network. */
export function describeError(error) {
  if (error instanceof ApiError) return `${error.code}: ${error.message}`;
  return error && error.message ? error.message : String(error);
}

export function formatTime(iso) {
  const date = new Date(iso);
  return Number.isNaN(date.getTime()) ? iso : date.toLocaleString();
}

/** Set a status line; kind is '', 'ok' or 'error'. */
export function setStatus(node, text, kind = '') {
  node.textContent = text;
  node.dataset.kind = kind;
}

export function sleep(ms, signal) {
  return new Promise((resolve) => {
    const timer = setTimeout(resolve, ms);
    if (signal) {
      signal.addEventListener('abort', () => {
        clearTimeout(timer);
        resolve();
      }, { once: true });
    }
  });
}

export const CHANNEL_LABELS = {
  in_app: 'In-app',
  email: 'Email',
  push: 'Push',
  sms: 'SMS',
  telegram: 'Telegram',
  slack: 'Slack',
  teams: 'Teams',
  whatsapp: 'WhatsApp',
};
