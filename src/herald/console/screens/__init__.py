"""The console's screens, one module each; none imports another, all share herald.console.core."""
