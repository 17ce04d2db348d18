"""The sample registry for a school platform, used by `herald dev`, the demo and the tests.

Every category and every channel appears at least once, with English (en) and Nepali (ne) wording.
"""

from __future__ import annotations

from herald.kinds.registry import (
    Digest,
    Escalation,
    EscalationStep,
    Kind,
    Registry,
    Template,
    WhatsAppTemplate,
)

T = Template


def _both(en: Template, ne: Template) -> dict[str, Template]:
    return {"en": en, "ne": ne}


def _same(body: str, title: str | None = None) -> dict[str, Template]:
    """One wording for both locales: it is only placeholders, so there is nothing to translate."""
    return _both(T(title=title, body=body), T(title=title, body=body))


def _titled(en_title: str, en_body: str, ne_title: str, ne_body: str) -> dict[str, Template]:
    return _both(T(title=en_title, body=en_body), T(title=ne_title, body=ne_body))


def _bodies(en: str, ne: str) -> dict[str, Template]:
    """Body-only wording (SMS, Telegram, WhatsApp): these channels have no title."""
    return _both(T(body=en), T(body=ne))


def _email(en_title: str, en_body: str, ne_title: str, ne_body: str) -> dict[str, Template]:
    """Email wording: every sample email opens by greeting the recipient by name."""
    return _titled(
        en_title, "Dear {{name}},\n\n" + en_body, ne_title, "प्रिय {{name}},\n\n" + ne_body
    )


def _title_message() -> dict[str, Template]:
    """The host's own title and message, as they are, in either locale."""
    return _same("{{message}}", title="{{title}}")


ANNOUNCEMENT = Kind(
    name="announcement.posted",
    category="announcement",
    channels=("in_app", "email", "push", "sms", "telegram"),
    variables={"title": "Sports day moved", "message": "It is now on Friday."},
    templates={
        "in_app": _title_message(),
        "email": _email("{{title}}", "{{message}}", "{{title}}", "{{message}}"),
        "push": _title_message(),
        "sms": _same("{{title}}: {{message}}"),
        "telegram": _same("<b>{{title}}</b>\n{{message}}"),
    },
)

# In-app now; email if still unread after 30 minutes; SMS if still unread two hours after that.
# Reading the in-app copy stops the plan (docs/escalation.md).
URGENT_ANNOUNCEMENT = Kind(
    name="announcement.urgent",
    category="announcement",
    channels=("in_app", "email", "sms"),
    priority="high",
    dedupe="repeatable",
    escalation=Escalation(
        steps=(EscalationStep("email", 30 * 60), EscalationStep("sms", 2 * 3600)),
    ),
    variables={"title": "School closed today", "message": "Heavy rain: stay at home."},
    templates={
        "in_app": _title_message(),
        "email": _email("Urgent: {{title}}", "{{message}}", "जरुरी: {{title}}", "{{message}}"),
        "sms": _bodies("URGENT {{title}}: {{message}}", "जरुरी {{title}}: {{message}}"),
    },
)

ASSIGNMENT = Kind(
    name="assignment.published",
    category="academic",
    channels=("in_app", "email", "push"),
    # A teacher posting five worksheets in an afternoon sends one email, not five.
    digest=Digest(window_seconds=3600, channels=("email",)),
    variables={"title": "Fractions worksheet", "subject": "Mathematics", "dueDate": "2026-12-04"},
    templates={
        "in_app": _titled(
            "New {{subject}} assignment",
            "{{title}} is due on {{dueDate}}.",
            "{{subject}} को नयाँ गृहकार्य",
            "{{title}} {{dueDate}} सम्म बुझाउनुपर्छ।",
        ),
        "email": _email(
            "New {{subject}} assignment: {{title}}",
            "{{title}} ({{subject}}) is due on {{dueDate}}.",
            "{{subject}} को नयाँ गृहकार्य: {{title}}",
            "{{title}} ({{subject}}) {{dueDate}} सम्म बुझाउनुपर्छ।",
        ),
        "push": _titled(
            "New {{subject}} assignment",
            "{{title}} — due {{dueDate}}",
            "{{subject}} को नयाँ गृहकार्य",
            "{{title}} — {{dueDate}}",
        ),
    },
)


def _attendance(name: str, lead_en: str, lead_ne: str) -> Kind:
    variables = {"studentName": "Aarav Shrestha", "date": "2026-11-30", "eventType": "absent"}
    return Kind(
        name=name,
        category="attendance",
        channels=("in_app", "email", "push", "sms"),
        variables=variables,
        templates={
            "in_app": _titled(
                f"{lead_en}: {{{{studentName}}}}",
                "{{date}}: {{studentName}} was marked {{eventType}}.",
                f"{lead_ne}: {{{{studentName}}}}",
                "{{date}}: {{studentName}} — {{eventType}}।",
            ),
            "email": _email(
                f"{lead_en}: {{{{studentName}}}} on {{{{date}}}}",
                "On {{date}}, {{studentName}} was marked {{eventType}}.",
                f"{lead_ne}: {{{{studentName}}}} ({{{{date}}}})",
                "{{date}} मा {{studentName}} — {{eventType}}।",
            ),
            "push": _titled(
                f"{lead_en}: {{{{studentName}}}}",
                "{{date}}: {{eventType}}",
                f"{lead_ne}: {{{{studentName}}}}",
                "{{date}}: {{eventType}}",
            ),
            "sms": _bodies(
                "{{date}}: {{studentName}} was marked {{eventType}}.",
                "{{date}}: {{studentName}} — {{eventType}}।",
            ),
        },
    )


ATTENDANCE_EVENT = _attendance("attendance.event", "Attendance", "हाजिरी")
ATTENDANCE_REMINDER = _attendance("attendance.reminder", "Reminder — attendance", "सम्झना — हाजिरी")

FEE_DUE = Kind(
    name="fee.due",
    category="finance",
    channels=("in_app", "email", "sms"),
    variables={"amount": "NPR 12,500", "dueDate": "2026-12-15"},
    templates={
        "in_app": _titled(
            "Fee due {{dueDate}}",
            "{{amount}} is due on {{dueDate}}.",
            "शुल्क बुझाउने मिति {{dueDate}}",
            "{{amount}} {{dueDate}} भित्र बुझाउनुहोस्।",
        ),
        "email": _email(
            "Fee due on {{dueDate}}",
            "{{amount}} is due on {{dueDate}}.",
            "शुल्क बुझाउने मिति {{dueDate}}",
            "{{amount}} {{dueDate}} भित्र बुझाउनुहोस्।",
        ),
        "sms": _bodies(
            "Fee of {{amount}} is due on {{dueDate}}.", "{{amount}} शुल्क {{dueDate}} भित्र बुझाउनुहोस्।"
        ),
    },
)

TRANSPORT_DELAY = Kind(
    name="transport.delay",
    category="transport",
    channels=("in_app", "push", "sms", "telegram"),
    dedupe="repeatable",
    priority="high",
    variables={"route": "Route 4 (Baneshwor)", "minutes": "20"},
    templates={
        "in_app": _titled(
            "Bus delayed: {{route}}",
            "{{route}} is running about {{minutes}} minutes late.",
            "बस ढिलो: {{route}}",
            "{{route}} करिब {{minutes}} मिनेट ढिलो छ।",
        ),
        "push": _titled(
            "Bus delayed",
            "{{route}}: about {{minutes}} minutes late",
            "बस ढिलो",
            "{{route}}: करिब {{minutes}} मिनेट ढिलो",
        ),
        "sms": _bodies(
            "{{route}} is about {{minutes}} min late.", "{{route}} करिब {{minutes}} मिनेट ढिलो छ।"
        ),
        "telegram": _bodies(
            "<b>Bus delayed</b>\n{{route}}: about {{minutes}} minutes late",
            "<b>बस ढिलो</b>\n{{route}}: करिब {{minutes}} मिनेट ढिलो",
        ),
    },
)

EVENT_SCHEDULED = Kind(
    name="event.scheduled",
    category="events",
    channels=("in_app", "email"),
    variables={"title": "Parent-teacher meeting", "date": "2026-12-10"},
    templates={
        "in_app": _titled(
            "{{title}}", "Scheduled for {{date}}.", "{{title}}", "{{date}} मा तय गरिएको।"
        ),
        "email": _email(
            "{{title}} on {{date}}",
            "{{title}} is scheduled for {{date}}.",
            "{{title}} — {{date}}",
            "{{title}} {{date}} मा हुनेछ।",
        ),
    },
)

SYSTEM_MAINTENANCE = Kind(
    name="system.maintenance",
    category="system",
    channels=("in_app", "email"),
    variables={"window": "Saturday 22:00–23:00"},
    templates={
        "in_app": _titled(
            "Planned maintenance",
            "The service will be unavailable {{window}}.",
            "नियोजित मर्मत",
            "सेवा {{window}} उपलब्ध हुने छैन।",
        ),
        "email": _email(
            "Planned maintenance: {{window}}",
            "The service will be unavailable {{window}}.",
            "नियोजित मर्मत: {{window}}",
            "सेवा {{window}} उपलब्ध हुने छैन।",
        ),
    },
)

# For staff (issue 46): Slack and Teams carry plain text, which their providers escape.
STAFF_NOTICE = Kind(
    name="staff.notice",
    category="announcement",
    channels=("in_app", "email", "slack", "teams"),
    variables={"title": "Staff meeting moved", "message": "It is now at 15:30 in the library."},
    templates={
        "in_app": _title_message(),
        "email": _email("{{title}}", "{{message}}", "{{title}}", "{{message}}"),
        "slack": _title_message(),
        "teams": _title_message(),
    },
)

# For guardians on WhatsApp (issue 46): each is sent as a template the school had Meta approve,
# in English and in Nepali, whose body's {{1}}, {{2}}, … are the parameters below, in order. The
# `whatsapp` wording is that approved text, with the kind's variables where Meta has the numbers.
ABSENCE_ALERT = Kind(
    name="attendance.absence_alert",
    category="attendance",
    channels=("in_app", "sms", "whatsapp"),
    priority="high",
    variables={"studentName": "Aarav Shrestha", "date": "2026-11-30"},
    whatsapp=WhatsAppTemplate(
        name="absence_alert",
        language="en",
        languages={"ne": "ne"},
        parameters=("studentName", "date"),
    ),
    templates={
        "in_app": _titled(
            "Absent: {{studentName}}",
            "{{studentName}} was absent on {{date}}.",
            "अनुपस्थित: {{studentName}}",
            "{{studentName}} {{date}} मा अनुपस्थित।",
        ),
        "sms": _bodies(
            "{{studentName}} was absent from school on {{date}}.",
            "{{studentName}} {{date}} मा विद्यालयमा अनुपस्थित।",
        ),
        "whatsapp": _bodies(
            "{{studentName}} was absent from school on {{date}}. Reply to let us know why.",
            "{{studentName}} {{date}} मा विद्यालयमा अनुपस्थित। कारण जवाफमा लेख्नुहोस्।",
        ),
    },
)

FEE_REMINDER = Kind(
    name="fee.reminder",
    category="finance",
    channels=("in_app", "email", "whatsapp"),
    variables={"studentName": "Aarav Shrestha", "amount": "NPR 12,500", "dueDate": "2026-12-15"},
    # The approved template's order is amount, student, date: the parameters follow it, not the
    # order the wording below happens to read in.
    whatsapp=WhatsAppTemplate(
        name="fee_reminder",
        language="en",
        languages={"ne": "ne"},
        parameters=("amount", "studentName", "dueDate"),
    ),
    templates={
        "in_app": _titled(
            "Fee due {{dueDate}}",
            "{{amount}} for {{studentName}} by {{dueDate}}.",
            "शुल्क {{dueDate}}",
            "{{studentName}} को {{amount}} {{dueDate}} भित्र बुझाउनुहोस्।",
        ),
        "email": _email(
            "Fee due on {{dueDate}}",
            "{{amount}} for {{studentName}} is due on {{dueDate}}.",
            "शुल्क बुझाउने मिति {{dueDate}}",
            "{{studentName}} को {{amount}} {{dueDate}} भित्र बुझाउनुहोस्।",
        ),
        "whatsapp": _bodies(
            "A fee of {{amount}} for {{studentName}} is due on {{dueDate}}.",
            "{{studentName}} को {{amount}} शुल्क {{dueDate}} भित्र बुझाउनुहोस्।",
        ),
    },
)

# What a reminder schedule sends (DESIGN.md §5.2): its title and message are the schedule's.
REMINDER_NOTICE = Kind(
    name="reminder.notice",
    category="events",
    channels=("in_app", "email", "push", "telegram"),
    variables={"title": "Homework time", "message": "Check today's homework in the diary."},
    templates={
        "in_app": _title_message(),
        "email": _email("Reminder: {{title}}", "{{message}}", "सम्झना: {{title}}", "{{message}}"),
        "push": _title_message(),
        "telegram": _bodies(
            "<b>Reminder: {{title}}</b>\n{{message}}", "<b>सम्झना: {{title}}</b>\n{{message}}"
        ),
    },
)

ACCOUNT_WELCOME = Kind(
    name="account.welcome",
    category="account",
    channels=("in_app", "email"),
    templates={
        "in_app": _titled(
            "Welcome, {{name}}",
            "Your account is ready.",
            "स्वागत छ, {{name}}",
            "तपाईंको खाता तयार छ।",
        ),
        "email": _email(
            "Welcome to the school portal",
            "Your account is ready.",
            "विद्यालय पोर्टलमा स्वागत छ",
            "तपाईंको खाता तयार छ।",
        ),
    },
)

PASSWORD_RESET = Kind(
    name="auth.password_reset",
    category="security",
    channels=("email",),
    # R-DEDUPE-12: collapse on a reset would deny account recovery permanently.
    dedupe="repeatable",
    unsuppressible=True,
    priority="urgent",
    secret_variables=("token",),
    templates={
        "email": _email(
            "Reset your password",
            "Use this code to reset your password: {{token}}\n\n"
            "If you did not ask for this, ignore this email.",
            "पासवर्ड रिसेट गर्नुहोस्",
            "पासवर्ड रिसेट गर्न यो कोड प्रयोग गर्नुहोस्: {{token}}",
        ),
    },
)

OTP = Kind(
    name="auth.otp",
    category="security",
    channels=("sms", "email"),
    dedupe="repeatable",
    unsuppressible=True,
    priority="urgent",
    secret_variables=("code",),
    templates={
        "sms": _bodies("Your code is {{code}}", "तपाईंको कोड {{code}} हो"),
        "email": _email(
            "Your sign-in code",
            "Your code is {{code}}",
            "तपाईंको साइन-इन कोड",
            "तपाईंको कोड {{code}} हो",
        ),
    },
)

EMAIL_CHANGE = Kind(
    name="auth.email_change",
    category="security",
    channels=("email",),
    dedupe="repeatable",
    unsuppressible=True,
    priority="urgent",
    secret_variables=("token", "toEmail"),
    templates={
        "email": _email(
            "Confirm your new email address",
            "Use this code to confirm this address: {{token}}",
            "नयाँ इमेल ठेगाना पुष्टि गर्नुहोस्",
            "यो ठेगाना पुष्टि गर्न कोड: {{token}}",
        ),
    },
)

SAMPLE_REGISTRY = Registry(
    [
        ANNOUNCEMENT,
        URGENT_ANNOUNCEMENT,
        ASSIGNMENT,
        ATTENDANCE_EVENT,
        ATTENDANCE_REMINDER,
        FEE_DUE,
        TRANSPORT_DELAY,
        EVENT_SCHEDULED,
        SYSTEM_MAINTENANCE,
        STAFF_NOTICE,
        ABSENCE_ALERT,
        FEE_REMINDER,
        REMINDER_NOTICE,
        ACCOUNT_WELCOME,
        PASSWORD_RESET,
        OTP,
        EMAIL_CHANGE,
    ]
)
