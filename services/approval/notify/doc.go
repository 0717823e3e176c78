// Package notify forwards approval requests to humans on chat
// (docs/how-to/approvals.md): a webhook, Slack's Web API or Telegram's Bot
// API, each with a configurable base URL. One replica at a time leads (an
// etcd election) and claims each approval before sending, so every approval
// is announced once however many replicas run.
package notify
