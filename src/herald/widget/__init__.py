"""`<herald-inbox>`: the drop-in inbox web component `herald api` serves (docs/widget.md: "The inbox
widget")."""
