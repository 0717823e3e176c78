// Package egress holds what every egress path of conch agrees on (a
// sandbox's network allowlist, the built-in request tools; see
// docs/reference/sandboxes.md): how an allowlist entry is written and
// matched, when one list only narrows another, which addresses no egress
// may reach, and how much of a run's connections its report keeps (Report).
//
// Names are matched as the client asked for them, case-insensitive,
// IDNA-normalised, exactly or by a "*." suffix; an IP literal matches only
// an entry that is that literal. Addresses are judged after resolution, on
// the address actually dialled.
package egress
