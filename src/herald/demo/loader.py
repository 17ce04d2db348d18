"""Load the demo school through the directory service, as a host's sync would.

Every call is an upsert, so loading twice leaves the same directory (and refreshes anything an
experiment changed). The caller owns the transaction.

`load_reachability` then does what the demo people's own apps would do — register a push device,
switch on a preference — through the devices and preferences services, acting as each person
with a token signed by the dev secret. It is idempotent too: a device already registered is only
touched, and a person who has ever saved preferences keeps them (their choice wins over the seed).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from sqlalchemy.ext.asyncio import AsyncConnection

from herald.auth import service as auth
from herald.auth.service import Operator
from herald.config import Settings
from herald.demo.school import School
from herald.devices import service as devices
from herald.directory import service as directory
from herald.kinds import Registry
from herald.preferences import service as preferences
from herald.preferences.schemas import PreferenceOverride, PreferencesUpdate
from herald.scheduling.reminders import service as reminders


@dataclass(frozen=True)
class LoadSummary:
    roles: int
    people: int
    people_created: int
    groups: int
    memberships: int
    guardianships: int

    def describe(self) -> str:
        return (
            f"{self.roles} roles, {self.people} people ({self.people_created} new), "
            f"{self.groups} groups, {self.memberships} memberships, "
            f"{self.guardianships} guardianships"
        )


async def load_school(conn: AsyncConnection, school: School) -> LoadSummary:
    tenant = school.tenant_id
    for role in school.roles:
        await directory.upsert_role(
            conn,
            tenant,
            role.code,
            directory.RoleInput(
                name=role.name,
                scope_kind=role.scope_kind,
                permissions=list(role.permissions),
                superadmin=role.superadmin,
            ),
        )
    people = await directory.upsert_people(
        conn,
        tenant,
        [
            directory.PersonBatchItem(
                external_id=person.external_id,
                full_name=person.full_name,
                email=person.email,
                phone=person.phone,
                locale=person.locale,
                timezone=person.timezone,
                country=person.country,
                telegram_chat_id=person.telegram_chat_id,
                slack_id=person.slack_id,
                roles=list(person.roles),
            )
            for person in school.people
        ],
    )
    for group in school.groups:
        await directory.upsert_group(
            conn, tenant, group.external_id, directory.GroupInput(name=group.name, kind=group.kind)
        )
    for membership in school.memberships:
        await directory.put_membership(
            conn, tenant, membership.group, membership.person, membership.member_role
        )
    for guardianship in school.guardianships:
        await directory.put_guardianship(conn, tenant, guardianship.student, guardianship.guardian)
    return LoadSummary(
        roles=len(school.roles),
        people=len(school.people),
        people_created=people.created,
        groups=len(school.groups),
        memberships=len(school.memberships),
        guardianships=len(school.guardianships),
    )


async def load_reachability(
    conn: AsyncConnection, settings: Settings, registry: Registry, school: School
) -> None:
    """Register the school's push devices and apply its preference opt-ins (see the module doc).

    Needs the dev JWT secret in `settings`; run after `load_school` in the same transaction.
    """
    people = {d.person for d in school.devices} | {o.person for o in school.opt_ins}
    for external_id in sorted(people):
        token = auth.sign_token(
            settings, tenant_id=school.tenant_id, subject=external_id, ttl=timedelta(minutes=1)
        )
        actor = await auth.authenticate_actor(conn, settings, token)
        for device in school.devices:
            if device.person == external_id:
                await devices.register_device(
                    conn,
                    actor,
                    devices.Target(device.token, device.platform, None),
                    limit=settings.device_limit,
                )
        opt_ins = [o for o in school.opt_ins if o.person == external_id]
        if not opt_ins:
            continue
        current = await preferences.read_preferences(conn, actor, registry)
        if current.version != 0:
            continue
        await preferences.save_preferences(
            conn,
            actor,
            registry,
            PreferencesUpdate(
                version=0,
                overrides=[
                    PreferenceOverride(category=o.category, channel=o.channel, enabled=True)
                    for o in opt_ins
                ],
            ),
        )


async def load_reminders(conn: AsyncConnection, registry: Registry, school: School) -> int:
    """Create the school's reminder schedules that do not exist yet (by name), through the
    reminders service as the system; an existing one keeps an operator's edits. Returns how
    many were created."""
    system = Operator(
        tenant_id=school.tenant_id,
        actor_kind="system",
        actor_id="herald-dev",
        person_id=None,
        permissions=frozenset(),
        superadmin=True,
    )
    created = 0
    for reminder in school.reminders:
        if await reminders.exists_named(conn, school.tenant_id, reminder.name):
            continue
        await reminders.create_reminder(
            conn,
            system,
            registry,
            {
                "name": reminder.name,
                "kind": reminder.kind,
                "variables": dict(reminder.variables),
                "audience": {"kind": "guardians_of_group", "groupIds": [reminder.audience_group]},
                "timezone": reminder.timezone,
                "localTime": reminder.local_time,
                "weekdays": list(reminder.weekdays),
            },
        )
        created += 1
    return created
