"""`<herald-inbox>`: the drop-in inbox web component `herald api` serves (README: "The inbox
widget")."""
