"""A small school for tenant `demo`: the directory `herald dev` loads and the guides' examples use.

Three classes of six students, their guardians (some guard two children, one is also a teacher),
three class teachers and a principal. Everything here is fictional; addresses are on
example.com and the phone numbers follow the Nepali mobile format (+97798…).

One guardian, the demo guardian, is reachable on every channel — a push device, a Telegram chat
and an SMS opt-in for announcements (SMS is off by default) — so one announcement shows all five
renderings on the `herald dev` outbox page.
"""

from __future__ import annotations

from dataclasses import dataclass

from herald import vocabulary

TENANT = "demo"
TIMEZONE = "Asia/Kathmandu"
COUNTRY = "NP"


@dataclass(frozen=True)
class Role:
    code: str
    name: str
    scope_kind: vocabulary.ScopeKind
    permissions: tuple[str, ...] = ()
    superadmin: bool = False


@dataclass(frozen=True)
class Person:
    external_id: str
    full_name: str
    locale: str
    roles: tuple[str, ...]
    email: str | None = None
    phone: str | None = None
    timezone: str = TIMEZONE
    country: str = COUNTRY
    telegram_chat_id: str | None = None
    slack_id: str | None = None


@dataclass(frozen=True)
class Group:
    external_id: str
    name: str
    kind: str = "class"


@dataclass(frozen=True)
class Membership:
    group: str
    person: str
    member_role: vocabulary.MemberRole


@dataclass(frozen=True)
class Guardianship:
    student: str
    guardian: str


@dataclass(frozen=True)
class PushDevice:
    """A (fake) push token registered for a person, as their app would through /v1/me/devices."""

    person: str
    token: str
    platform: vocabulary.Platform


@dataclass(frozen=True)
class OptIn:
    """A category × channel cell a person switched on, as they would through /v1/me/preferences."""

    person: str
    category: str
    channel: str


@dataclass(frozen=True)
class Reminder:
    """A reminder schedule the school runs, as an operator would create it through
    /v1/admin/reminders (DESIGN.md §5.2)."""

    name: str
    kind: str
    variables: tuple[tuple[str, str], ...]
    audience_group: str
    local_time: str
    weekdays: tuple[int, ...]
    timezone: str = TIMEZONE


@dataclass(frozen=True)
class School:
    tenant_id: str
    roles: tuple[Role, ...]
    people: tuple[Person, ...]
    groups: tuple[Group, ...]
    memberships: tuple[Membership, ...]
    guardianships: tuple[Guardianship, ...]
    devices: tuple[PushDevice, ...] = ()
    opt_ins: tuple[OptIn, ...] = ()
    reminders: tuple[Reminder, ...] = ()

    def person(self, external_id: str) -> Person:
        return next(p for p in self.people if p.external_id == external_id)

    def guardians_of_group(self, group: str) -> list[str]:
        students = {
            m.person for m in self.memberships if m.group == group and m.member_role == "student"
        }
        found: list[str] = []
        for g in self.guardianships:
            if g.student in students and g.guardian not in found:
                found.append(g.guardian)
        return found


ROLES = (
    Role("guardian", "Guardian", "guardian"),
    Role("student", "Student", "student"),
    Role("teacher", "Teacher", "staff", permissions=("NotificationHistory_READ",)),
    Role("principal", "Principal", "staff", superadmin=True),
    # The second person of a broadcast's two (DESIGN.md §5.2): drafts and approves broadcasts.
    Role(
        "deputy",
        "Deputy principal",
        "staff",
        permissions=(*vocabulary.BROADCAST_PERMISSIONS, "NotificationHistory_READ"),
    ),
)

GROUPS = (
    Group("class-7a", "Class 7A"),
    Group("class-7b", "Class 7B"),
    Group("class-8a", "Class 8A"),
)

# class → [(student id, full name, locale)]
STUDENTS: dict[str, list[tuple[str, str, str]]] = {
    "class-7a": [
        ("aarav-shrestha", "Aarav Shrestha", "en"),
        ("sita-gurung", "Sita Gurung", "ne"),
        ("bikash-tamang", "Bikash Tamang", "ne"),
        ("priya-karki", "Priya Karki", "en"),
        ("roshan-thapa", "Roshan Thapa", "ne"),
        ("anisha-regmi", "Anisha Regmi", "en"),
    ],
    "class-7b": [
        ("kiran-magar", "Kiran Magar", "ne"),
        ("sabina-lama", "Sabina Lama", "en"),
        ("nabin-adhikari", "Nabin Adhikari", "ne"),
        ("puja-bhandari", "Puja Bhandari", "en"),
        ("suman-khadka", "Suman Khadka", "ne"),
        ("asmita-poudel", "Asmita Poudel", "en"),
    ],
    "class-8a": [
        ("rohan-shrestha", "Rohan Shrestha", "en"),
        ("mina-gurung", "Mina Gurung", "ne"),
        ("dipesh-kc", "Dipesh KC", "en"),
        ("srijana-basnet", "Srijana Basnet", "ne"),
        ("aayush-joshi", "Aayush Joshi", "en"),
        ("nisha-maharjan", "Nisha Maharjan", "ne"),
    ],
}

# (guardian id, full name, locale, [students]) — the Shresthas and Maya Gurung guard two children
# in different classes; Deepak Regmi is Anisha's father and the class teacher of 8A.
GUARDIANS: list[tuple[str, str, str, list[str]]] = [
    ("ramesh-shrestha", "Ramesh Shrestha", "en", ["aarav-shrestha", "rohan-shrestha"]),
    ("gita-shrestha", "Gita Shrestha", "ne", ["aarav-shrestha", "rohan-shrestha"]),
    ("maya-gurung", "Maya Gurung", "ne", ["sita-gurung", "mina-gurung"]),
    ("dawa-tamang", "Dawa Tamang", "ne", ["bikash-tamang"]),
    ("suresh-karki", "Suresh Karki", "en", ["priya-karki"]),
    ("anita-karki", "Anita Karki", "ne", ["priya-karki"]),
    ("kamala-thapa", "Kamala Thapa", "ne", ["roshan-thapa"]),
    ("deepak-regmi", "Deepak Regmi", "en", ["anisha-regmi"]),
    ("sarita-regmi", "Sarita Regmi", "ne", ["anisha-regmi"]),
    ("bhim-magar", "Bhim Magar", "ne", ["kiran-magar"]),
    ("pemba-lama", "Pemba Lama", "en", ["sabina-lama"]),
    ("dolma-lama", "Dolma Lama", "ne", ["sabina-lama"]),
    ("krishna-adhikari", "Krishna Adhikari", "ne", ["nabin-adhikari"]),
    ("ganesh-bhandari", "Ganesh Bhandari", "en", ["puja-bhandari"]),
    ("rita-khadka", "Rita Khadka", "ne", ["suman-khadka"]),
    ("bishnu-khadka", "Bishnu Khadka", "en", ["suman-khadka"]),
    ("shanti-poudel", "Shanti Poudel", "en", ["asmita-poudel"]),
    ("raju-kc", "Raju KC", "en", ["dipesh-kc"]),
    ("manju-basnet", "Manju Basnet", "ne", ["srijana-basnet"]),
    ("prakash-joshi", "Prakash Joshi", "en", ["aayush-joshi"]),
    ("kabita-joshi", "Kabita Joshi", "ne", ["aayush-joshi"]),
    ("rajendra-maharjan", "Rajendra Maharjan", "ne", ["nisha-maharjan"]),
]

# (teacher id, full name, locale, class taught)
TEACHERS: list[tuple[str, str, str, str]] = [
    ("hari-sharma", "Hari Sharma", "en", "class-7a"),
    ("laxmi-pandey", "Laxmi Pandey", "ne", "class-7b"),
    ("deepak-regmi", "Deepak Regmi", "en", "class-8a"),
]

PRINCIPAL = ("sunita-koirala", "Sunita Koirala", "en")
# The principal drafts a broadcast, the deputy approves it (or the other way round).
DEPUTY = ("ramila-adhikari", "Ramila Adhikari", "en")

# The guardian `herald dev` signs a token for: a parent of Aarav (7A) and Rohan (8A).
DEMO_GUARDIAN = "ramesh-shrestha"
# What makes the demo guardian reachable beyond email and the inbox (see the module docstring).
DEMO_TELEGRAM_CHAT_ID = "100200300"
# The principal reads staff notices in Slack (`herald dev` records them in the outbox).
DEMO_PRINCIPAL_SLACK_ID = "U0DEMOPRINCIPAL"
DEMO_DEVICES = (PushDevice(DEMO_GUARDIAN, "demo-push-token-ramesh-android", "android"),)
DEMO_OPT_INS = (OptIn(DEMO_GUARDIAN, "announcement", "sms"),)
# One weekday reminder to 7A's guardians (the demo guardian among them): it arrives on the demo
# page at 17:00 Kathmandu time, Monday to Friday.
DEMO_REMINDERS = (
    Reminder(
        name="Homework time (class 7A)",
        kind="reminder.notice",
        variables=(
            ("title", "Homework time"),
            ("message", "Please check today's homework in the class 7A diary."),
        ),
        audience_group="class-7a",
        local_time="17:00",
        weekdays=(1, 2, 3, 4, 5),
    ),
)


def _email(external_id: str) -> str:
    return external_id.replace("-", ".") + "@example.com"


def _phone(series: int, n: int) -> str:
    # Nepali mobile numbers: +977 98X XXXXXXX (ten national digits).
    return f"+97798{series}{n:07d}"


def build_school() -> School:
    people: dict[str, Person] = {}
    memberships: list[Membership] = []
    guardianships: list[Guardianship] = []

    for group, students in STUDENTS.items():
        for n, (external_id, name, locale) in enumerate(students, start=1):
            # The older class (8A) has phones and school email; the younger ones do not.
            grown = group == "class-8a"
            people[external_id] = Person(
                external_id,
                name,
                locale,
                roles=("student",),
                email=_email(external_id) if grown else None,
                phone=_phone(6, 800 + n) if grown else None,
            )
            memberships.append(Membership(group, external_id, "student"))

    staff_roles: dict[str, tuple[str, ...]] = {}
    for external_id, _, _, group in TEACHERS:
        staff_roles[external_id] = ("teacher",)
        memberships.append(Membership(group, external_id, "teacher"))

    for n, (external_id, name, locale, children) in enumerate(GUARDIANS, start=1):
        people[external_id] = Person(
            external_id,
            name,
            locale,
            roles=(*staff_roles.get(external_id, ()), "guardian"),
            email=_email(external_id),
            phone=_phone(4, n),
            telegram_chat_id=DEMO_TELEGRAM_CHAT_ID if external_id == DEMO_GUARDIAN else None,
        )
        guardianships.extend(Guardianship(child, external_id) for child in children)

    for n, (external_id, name, locale, _) in enumerate(TEACHERS, start=1):
        if external_id not in people:
            people[external_id] = Person(
                external_id,
                name,
                locale,
                roles=("teacher",),
                email=_email(external_id),
                phone=_phone(5, n),
            )

    external_id, name, locale = PRINCIPAL
    people[external_id] = Person(
        external_id,
        name,
        locale,
        roles=("principal",),
        email=_email(external_id),
        phone=_phone(5, 100),
        slack_id=DEMO_PRINCIPAL_SLACK_ID,
    )

    external_id, name, locale = DEPUTY
    people[external_id] = Person(
        external_id,
        name,
        locale,
        roles=("deputy",),
        email=_email(external_id),
        phone=_phone(5, 101),
    )

    return School(
        tenant_id=TENANT,
        roles=ROLES,
        people=tuple(people.values()),
        groups=GROUPS,
        memberships=tuple(memberships),
        guardianships=tuple(guardianships),
        devices=DEMO_DEVICES,
        opt_ins=DEMO_OPT_INS,
        reminders=DEMO_REMINDERS,
    )


SCHOOL = build_school()
