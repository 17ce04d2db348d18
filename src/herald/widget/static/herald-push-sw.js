/*
 * Herald's Web Push handler for a host's service worker. Served by `herald api` at
 * /v1/widget/herald-push-sw.js. A service worker must come from the host page's own origin, so
 * the host serves one (for example /herald-sw.js) holding this one line:
 *
 *   importScripts('https://herald.example.com/v1/widget/herald-push-sw.js');
 *
 * and names it on the element: <herald-inbox push-worker="/herald-sw.js" …>. A host that has a
 * service worker already adds the same line to it.
 *
 * Each push is the JSON Herald encrypted for this browser: {title, body, url?, kind?}. It is
 * shown as a notification; a click focuses a window already on the notification's link or opens
 * it (only an http(s) link is followed).
 */
/* global self, clients */
(() => {
  'use strict';

  function safeUrl(value) {
    try {
      const url = new URL(String(value), self.location.origin);
      return url.protocol === 'https:' || url.protocol === 'http:' ? url.href : null;
    } catch {
      return null;
    }
  }

  self.addEventListener('push', (event) => {
    let message = {};
    try { message = event.data ? event.data.json() : {}; } catch { message = { body: event.data ? event.data.text() : '' }; }
    const title = String(message.title || '') || 'Notification';
    const options = { body: String(message.body || ''), data: { url: safeUrl(message.url) }, tag: message.kind ? String(message.kind) : undefined };
    event.waitUntil(self.registration.showNotification(title, options));
  });

  self.addEventListener('notificationclick', (event) => {
    event.notification.close();
    const url = event.notification.data && event.notification.data.url;
    if (!url) return;
    event.waitUntil((async () => {
      const open = await clients.matchAll({ type: 'window', includeUncontrolled: true });
      for (const client of open) {
        if (client.url === url && 'focus' in client) return client.focus();
      }
      return clients.openWindow(url);
    })());
  });
})();
