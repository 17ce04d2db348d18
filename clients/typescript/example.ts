// A typed Herald client. `schema.d.ts` is generated from Herald's OpenAPI document:
//   npx openapi-typescript openapi.json -o schema.d.ts
// and is not committed (tests/e2e/test_typescript_client.py generates it and type-checks this file).
import createClient from "openapi-fetch";
import type { components, paths } from "./schema";

type PreferencesUpdate = components["schemas"]["PreferencesUpdate"];
type PreferencesView = components["schemas"]["PreferencesView"];
type EventCreate = components["schemas"]["EventCreate"];
type EventCreated = components["schemas"]["EventCreated"];
/** Herald's error envelope for a 409 on PUT /v1/me/preferences, exactly as the spec declares it. */
type PreferencesConflict =
  paths["/v1/me/preferences"]["put"]["responses"][409]["content"]["application/json"];

export class HeraldError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
  ) {
    super(`${status} ${code}: ${message}`);
  }
}

/** The person's side (a JWT the host signed for one person of one tenant). */
export function userClient(baseUrl: string, userJwt: string) {
  return createClient<paths>({ baseUrl, headers: { Authorization: `Bearer ${userJwt}` } });
}

/** The host's server side (an API key from `herald keys create`). */
export function hostClient(baseUrl: string, apiKey: string) {
  return createClient<paths>({ baseUrl, headers: { Authorization: `Bearer ${apiKey}` } });
}

type UserClient = ReturnType<typeof userClient>;
type HostClient = ReturnType<typeof hostClient>;

async function readPreferences(client: UserClient): Promise<PreferencesView> {
  const { data, error, response } = await client.GET("/v1/me/preferences");
  if (error !== undefined) {
    throw new HeraldError(response.status, error.error.code, error.error.message);
  }
  return data;
}

/**
 * Saves a change to the preferences with optimistic concurrency: PUT carries the version it read;
 * when another device saved first Herald answers 409 NOTIFICATION_PREFERENCE_VERSION_CONFLICT,
 * and the change is reapplied to a fresh read and sent again.
 */
export async function savePreferences(
  client: UserClient,
  change: (current: PreferencesView) => PreferencesUpdate,
  attempts = 3,
): Promise<number> {
  for (let attempt = 1; ; attempt++) {
    const current = await readPreferences(client);
    const { data, error, response } = await client.PUT("/v1/me/preferences", {
      body: change(current),
    });
    if (data !== undefined) {
      return data.version;
    }
    if (response.status === 409 && attempt < attempts) {
      const conflict = error as PreferencesConflict;
      if (conflict.error.code === "NOTIFICATION_PREFERENCE_VERSION_CONFLICT") {
        console.warn(`preferences changed elsewhere, retrying: ${conflict.error.message}`);
        continue;
      }
    }
    throw new HeraldError(response.status, error.error.code, error.error.message);
  }
}

/** Turns email off for announcements, keeping everything else the person chose. */
export function muteAnnouncementEmail(client: UserClient): Promise<number> {
  return savePreferences(client, (current) => ({
    version: current.version,
    channels: current.channels,
    quietHours: current.quietHours,
    overrides: [
      ...current.overrides.filter(
        (o) => !(o.category === "announcement" && o.channel === "email"),
      ),
      { category: "announcement", channel: "email", enabled: false },
    ],
  }));
}

/** Publishes an announcement to two groups; the Idempotency-Key makes a retried call safe. */
export async function postAnnouncement(
  client: HostClient,
  idempotencyKey: string,
): Promise<EventCreated> {
  const body: EventCreate = {
    kind: "announcement.posted",
    audience: { kind: "group", groupIds: ["grade-7a", "grade-7b"] },
    variables: {
      title: "Timetable change",
      message: "Tomorrow's first lesson starts at 09:00.",
    },
    channels: ["in_app", "email"],
    actionUrl: "/announcements/42",
  };
  const { data, error, response } = await client.POST("/v1/events", {
    params: { header: { "idempotency-key": idempotencyKey } },
    body,
  });
  if (error !== undefined) {
    throw new HeraldError(response.status, error.error.code, error.error.message);
  }
  return data; // 201 when recorded, 200 when folded into an event already recorded
}
