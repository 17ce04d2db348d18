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


ANNOUNCEMENT = Kind(
    name="announcement.posted",
    category="announcement",
    channels=("in_app", "email", "push", "sms", "telegram"),
    variables={"title": "Sports day moved", "message": "It is now on Friday."},
    templates={
        "in_app": _both(
            T(title="{{title}}", body="{{message}}"), T(title="{{title}}", body="{{message}}")
        ),
        "email": _both(
            T(title="{{title}}", body="Dear {{name}},\n\n{{message}}"),
            T(title="{{title}}", body="प्रिय {{name}},\n\n{{message}}"),
        ),
        "push": _both(
            T(title="{{title}}", body="{{message}}"), T(title="{{title}}", body="{{message}}")
        ),
        "sms": _both(T(body="{{title}}: {{message}}"), T(body="{{title}}: {{message}}")),
        "telegram": _both(
            T(body="<b>{{title}}</b>\n{{message}}"), T(body="<b>{{title}}</b>\n{{message}}")
        ),
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
        "in_app": _both(
            T(title="{{title}}", body="{{message}}"), T(title="{{title}}", body="{{message}}")
        ),
        "email": _both(
            T(title="Urgent: {{title}}", body="Dear {{name}},\n\n{{message}}"),
            T(title="जरुरी: {{title}}", body="प्रिय {{name}},\n\n{{message}}"),
        ),
        "sms": _both(
            T(body="URGENT {{title}}: {{message}}"), T(body="जरुरी {{title}}: {{message}}")
        ),
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
        "in_app": _both(
            T(title="New {{subject}} assignment", body="{{title}} is due on {{dueDate}}."),
            T(title="{{subject}} को नयाँ गृहकार्य", body="{{title}} {{dueDate}} सम्म बुझाउनुपर्छ।"),
        ),
        "email": _both(
            T(
                title="New {{subject}} assignment: {{title}}",
                body="Dear {{name}},\n\n{{title}} ({{subject}}) is due on {{dueDate}}.",
            ),
            T(
                title="{{subject}} को नयाँ गृहकार्य: {{title}}",
                body="प्रिय {{name}},\n\n{{title}} ({{subject}}) {{dueDate}} सम्म बुझाउनुपर्छ।",
            ),
        ),
        "push": _both(
            T(title="New {{subject}} assignment", body="{{title}} — due {{dueDate}}"),
            T(title="{{subject}} को नयाँ गृहकार्य", body="{{title}} — {{dueDate}}"),
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
            "in_app": _both(
                T(
                    title=f"{lead_en}: {{{{studentName}}}}",
                    body="{{date}}: {{studentName}} was marked {{eventType}}.",
                ),
                T(
                    title=f"{lead_ne}: {{{{studentName}}}}",
                    body="{{date}}: {{studentName}} — {{eventType}}।",
                ),
            ),
            "email": _both(
                T(
                    title=f"{lead_en}: {{{{studentName}}}} on {{{{date}}}}",
                    body="Dear {{name}},\n\nOn {{date}}, {{studentName}} was marked {{eventType}}.",
                ),
                T(
                    title=f"{lead_ne}: {{{{studentName}}}} ({{{{date}}}})",
                    body="प्रिय {{name}},\n\n{{date}} मा {{studentName}} — {{eventType}}।",
                ),
            ),
            "push": _both(
                T(title=f"{lead_en}: {{{{studentName}}}}", body="{{date}}: {{eventType}}"),
                T(title=f"{lead_ne}: {{{{studentName}}}}", body="{{date}}: {{eventType}}"),
            ),
            "sms": _both(
                T(body="{{date}}: {{studentName}} was marked {{eventType}}."),
                T(body="{{date}}: {{studentName}} — {{eventType}}।"),
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
        "in_app": _both(
            T(title="Fee due {{dueDate}}", body="{{amount}} is due on {{dueDate}}."),
            T(title="शुल्क बुझाउने मिति {{dueDate}}", body="{{amount}} {{dueDate}} भित्र बुझाउनुहोस्।"),
        ),
        "email": _both(
            T(
                title="Fee due on {{dueDate}}",
                body="Dear {{name}},\n\n{{amount}} is due on {{dueDate}}.",
            ),
            T(
                title="शुल्क बुझाउने मिति {{dueDate}}",
                body="प्रिय {{name}},\n\n{{amount}} {{dueDate}} भित्र बुझाउनुहोस्।",
            ),
        ),
        "sms": _both(
            T(body="Fee of {{amount}} is due on {{dueDate}}."),
            T(body="{{amount}} शुल्क {{dueDate}} भित्र बुझाउनुहोस्।"),
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
        "in_app": _both(
            T(
                title="Bus delayed: {{route}}",
                body="{{route}} is running about {{minutes}} minutes late.",
            ),
            T(title="बस ढिलो: {{route}}", body="{{route}} करिब {{minutes}} मिनेट ढिलो छ।"),
        ),
        "push": _both(
            T(title="Bus delayed", body="{{route}}: about {{minutes}} minutes late"),
            T(title="बस ढिलो", body="{{route}}: करिब {{minutes}} मिनेट ढिलो"),
        ),
        "sms": _both(
            T(body="{{route}} is about {{minutes}} min late."),
            T(body="{{route}} करिब {{minutes}} मिनेट ढिलो छ।"),
        ),
        "telegram": _both(
            T(body="<b>Bus delayed</b>\n{{route}}: about {{minutes}} minutes late"),
            T(body="<b>बस ढिलो</b>\n{{route}}: करिब {{minutes}} मिनेट ढिलो"),
        ),
    },
)

EVENT_SCHEDULED = Kind(
    name="event.scheduled",
    category="events",
    channels=("in_app", "email"),
    variables={"title": "Parent-teacher meeting", "date": "2026-12-10"},
    templates={
        "in_app": _both(
            T(title="{{title}}", body="Scheduled for {{date}}."),
            T(title="{{title}}", body="{{date}} मा तय गरिएको।"),
        ),
        "email": _both(
            T(
                title="{{title}} on {{date}}",
                body="Dear {{name}},\n\n{{title}} is scheduled for {{date}}.",
            ),
            T(title="{{title}} — {{date}}", body="प्रिय {{name}},\n\n{{title}} {{date}} मा हुनेछ।"),
        ),
    },
)

SYSTEM_MAINTENANCE = Kind(
    name="system.maintenance",
    category="system",
    channels=("in_app", "email"),
    variables={"window": "Saturday 22:00–23:00"},
    templates={
        "in_app": _both(
            T(title="Planned maintenance", body="The service will be unavailable {{window}}."),
            T(title="नियोजित मर्मत", body="सेवा {{window}} उपलब्ध हुने छैन।"),
        ),
        "email": _both(
            T(
                title="Planned maintenance: {{window}}",
                body="Dear {{name}},\n\nThe service will be unavailable {{window}}.",
            ),
            T(
                title="नियोजित मर्मत: {{window}}",
                body="प्रिय {{name}},\n\nसेवा {{window}} उपलब्ध हुने छैन।",
            ),
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
        "in_app": _both(
            T(title="{{title}}", body="{{message}}"), T(title="{{title}}", body="{{message}}")
        ),
        "email": _both(
            T(title="{{title}}", body="Dear {{name}},\n\n{{message}}"),
            T(title="{{title}}", body="प्रिय {{name}},\n\n{{message}}"),
        ),
        "slack": _both(
            T(title="{{title}}", body="{{message}}"), T(title="{{title}}", body="{{message}}")
        ),
        "teams": _both(
            T(title="{{title}}", body="{{message}}"), T(title="{{title}}", body="{{message}}")
        ),
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
        "in_app": _both(
            T(title="Absent: {{studentName}}", body="{{studentName}} was absent on {{date}}."),
            T(title="अनुपस्थित: {{studentName}}", body="{{studentName}} {{date}} मा अनुपस्थित।"),
        ),
        "sms": _both(
            T(body="{{studentName}} was absent from school on {{date}}."),
            T(body="{{studentName}} {{date}} मा विद्यालयमा अनुपस्थित।"),
        ),
        "whatsapp": _both(
            T(body="{{studentName}} was absent from school on {{date}}. Reply to let us know why."),
            T(body="{{studentName}} {{date}} मा विद्यालयमा अनुपस्थित। कारण जवाफमा लेख्नुहोस्।"),
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
        "in_app": _both(
            T(title="Fee due {{dueDate}}", body="{{amount}} for {{studentName}} by {{dueDate}}."),
            T(
                title="शुल्क {{dueDate}}",
                body="{{studentName}} को {{amount}} {{dueDate}} भित्र बुझाउनुहोस्।",
            ),
        ),
        "email": _both(
            T(
                title="Fee due on {{dueDate}}",
                body="Dear {{name}},\n\n{{amount}} for {{studentName}} is due on {{dueDate}}.",
            ),
            T(
                title="शुल्क बुझाउने मिति {{dueDate}}",
                body="प्रिय {{name}},\n\n{{studentName}} को {{amount}} {{dueDate}} भित्र बुझाउनुहोस्।",
            ),
        ),
        "whatsapp": _both(
            T(body="A fee of {{amount}} for {{studentName}} is due on {{dueDate}}."),
            T(body="{{studentName}} को {{amount}} शुल्क {{dueDate}} भित्र बुझाउनुहोस्।"),
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
        "in_app": _both(
            T(title="{{title}}", body="{{message}}"), T(title="{{title}}", body="{{message}}")
        ),
        "email": _both(
            T(title="Reminder: {{title}}", body="Dear {{name}},\n\n{{message}}"),
            T(title="सम्झना: {{title}}", body="प्रिय {{name}},\n\n{{message}}"),
        ),
        "push": _both(
            T(title="{{title}}", body="{{message}}"), T(title="{{title}}", body="{{message}}")
        ),
        "telegram": _both(
            T(body="<b>Reminder: {{title}}</b>\n{{message}}"),
            T(body="<b>सम्झना: {{title}}</b>\n{{message}}"),
        ),
    },
)

ACCOUNT_WELCOME = Kind(
    name="account.welcome",
    category="account",
    channels=("in_app", "email"),
    templates={
        "in_app": _both(
            T(title="Welcome, {{name}}", body="Your account is ready."),
            T(title="स्वागत छ, {{name}}", body="तपाईंको खाता तयार छ।"),
        ),
        "email": _both(
            T(
                title="Welcome to the school portal",
                body="Dear {{name}},\n\nYour account is ready.",
            ),
            T(title="विद्यालय पोर्टलमा स्वागत छ", body="प्रिय {{name}},\n\nतपाईंको खाता तयार छ।"),
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
        "email": _both(
            T(
                title="Reset your password",
                body="Dear {{name}},\n\nUse this code to reset your password: {{token}}\n\n"
                "If you did not ask for this, ignore this email.",
            ),
            T(
                title="पासवर्ड रिसेट गर्नुहोस्",
                body="प्रिय {{name}},\n\nपासवर्ड रिसेट गर्न यो कोड प्रयोग गर्नुहोस्: {{token}}",
            ),
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
        "sms": _both(T(body="Your code is {{code}}"), T(body="तपाईंको कोड {{code}} हो")),
        "email": _both(
            T(title="Your sign-in code", body="Dear {{name}},\n\nYour code is {{code}}"),
            T(title="तपाईंको साइन-इन कोड", body="प्रिय {{name}},\n\nतपाईंको कोड {{code}} हो"),
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
        "email": _both(
            T(
                title="Confirm your new email address",
                body="Dear {{name}},\n\nUse this code to confirm this address: {{token}}",
            ),
            T(
                title="नयाँ इमेल ठेगाना पुष्टि गर्नुहोस्",
                body="प्रिय {{name}},\n\nयो ठेगाना पुष्टि गर्न कोड: {{token}}",
            ),
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
