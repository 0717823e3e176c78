package errs

import (
	"errors"
	"net/http"
	"regexp"
	"strings"

	"google.golang.org/grpc/status"
)

// The types of an HTTP error answer: what class of problem it is, which
// tells a client what it can do about it.
const (
	// TypeInvalidRequest: the request is wrong; change it.
	TypeInvalidRequest = "invalid_request_error"
	// TypeAuthentication: no valid API key.
	TypeAuthentication = "authentication_error"
	// TypePermission: the key may not do this.
	TypePermission = "permission_error"
	// TypeNotFound: no such object (in the caller's account) or path.
	TypeNotFound = "not_found_error"
	// TypeConflict: the object exists, or changed since it was read.
	TypeConflict = "conflict_error"
	// TypeRateLimit: a quota, limit or capacity was reached.
	TypeRateLimit = "rate_limit_error"
	// TypeTimeout: the operation ran out of time.
	TypeTimeout = "timeout_error"
	// TypeUnavailable: conch or a part of it is briefly unavailable; retry.
	TypeUnavailable = "unavailable_error"
	// TypeServer: conch failed; the request may be fine.
	TypeServer = "server_error"
)

// Reasons that change an error's HTTP answer from its kind's (see
// Public). Every reason is its answer's code, in lower case.
const (
	// ReasonQuotaExceeded marks a refusal by one of an account's quotas.
	ReasonQuotaExceeded = "QUOTA_EXCEEDED"
	// ReasonWorkspaceQuotaExceeded marks a change that would take a
	// persistent workspace beyond its quota: 413, and no Retry-After,
	// since waiting does not make room.
	ReasonWorkspaceQuotaExceeded = "WORKSPACE_QUOTA_EXCEEDED"
	// ReasonRequestTooLarge marks a request body beyond its limit: 413.
	ReasonRequestTooLarge = "REQUEST_TOO_LARGE"
	// ReasonRequestTimeout marks a request body that stalled: 408.
	ReasonRequestTimeout = "REQUEST_TIMEOUT"
	// ReasonMethodNotAllowed marks a path that does not answer the
	// request's method: 405.
	ReasonMethodNotAllowed = "METHOD_NOT_ALLOWED"
	// ReasonInvalidAPIKey marks a request without a valid API key.
	ReasonInvalidAPIKey = "INVALID_API_KEY"
)

// statusClientClosedRequest is the status of a request the client gave up
// on (nginx's 499), which grpc-gateway answers Canceled with.
const statusClientClosedRequest = 499

// retrySeconds is the Retry-After of answers that mean "overloaded or
// briefly unavailable, try again".
const retrySeconds = "2"

// httpClass is how an error is answered over HTTP.
type httpClass struct {
	status int
	typ    string
	retry  bool
}

// kindHTTP is the one table from kinds to HTTP answers. The statuses are
// grpc-gateway's for the kinds' gRPC codes, so that an error answers the
// same whichever way it reached the router.
var kindHTTP = [...]httpClass{
	Internal:           {http.StatusInternalServerError, TypeServer, false},
	InvalidArgument:    {http.StatusBadRequest, TypeInvalidRequest, false},
	NotFound:           {http.StatusNotFound, TypeNotFound, false},
	AlreadyExists:      {http.StatusConflict, TypeConflict, false},
	PermissionDenied:   {http.StatusForbidden, TypePermission, false},
	Unauthenticated:    {http.StatusUnauthorized, TypeAuthentication, false},
	ResourceExhausted:  {http.StatusTooManyRequests, TypeRateLimit, true},
	FailedPrecondition: {http.StatusBadRequest, TypeInvalidRequest, false},
	Conflict:           {http.StatusConflict, TypeConflict, false},
	DeadlineExceeded:   {http.StatusGatewayTimeout, TypeTimeout, false},
	Unavailable:        {http.StatusServiceUnavailable, TypeUnavailable, true},
	Unimplemented:      {http.StatusNotImplemented, TypeInvalidRequest, false},
	Canceled:           {statusClientClosedRequest, TypeServer, false},
}

// reasonHTTP holds the reasons whose answer is not their kind's.
var reasonHTTP = map[string]httpClass{
	ReasonWorkspaceQuotaExceeded: {http.StatusRequestEntityTooLarge, TypeRateLimit, false},
	ReasonRequestTooLarge:        {http.StatusRequestEntityTooLarge, TypeInvalidRequest, false},
	ReasonRequestTimeout:         {http.StatusRequestTimeout, TypeTimeout, false},
	ReasonMethodNotAllowed:       {http.StatusMethodNotAllowed, TypeInvalidRequest, false},
}

func (k Kind) http() httpClass {
	if k < 0 || int(k) >= len(kindHTTP) {
		return kindHTTP[Internal]
	}
	return kindHTTP[k]
}

// snake is the kind's name in snake_case ("not_found"): the code of its
// HTTP answers.
func (k Kind) snake() string { return strings.ReplaceAll(k.String(), " ", "_") }

// Answer is an error as an HTTP client is told it: the status, the
// error object's type, code, param and message, and the Retry-After.
// conch's REST API writes it in its envelope, the OpenAI-compatible API
// in OpenAI's error object.
type Answer struct {
	// Status is the HTTP status.
	Status int
	// Type is the class of problem (Type… constants).
	Type string
	// Code is the error's reason in lower case, or else its kind in
	// snake_case.
	Code string
	// Param is the request field at fault, "" for none.
	Param string
	// Message says what was wrong, with nothing of conch's insides.
	Message string
	// RetryAfter is the Retry-After in seconds, "" for none.
	RetryAfter string
	// Hidden reports that Message is not the error's own: log the error.
	Hidden bool
}

// Public is what an HTTP client is told of err: the status, type and code
// of its kind (kindHTTP), or of its reason where that differs
// (reasonHTTP); the field at fault, which is its Field (here or, as a
// status detail, in the peer that sent it) or, for an InvalidArgument
// error, the one its message starts with (FieldInMessage); and a message
// without the cluster's insides: an Internal error's is "internal error",
// a gRPC transport failure's is that a service is unavailable, gRPC's
// "rpc error: code = … desc = " prefixes are dropped and service
// addresses hidden (HideAddresses).
func Public(err error) Answer {
	k := KindOf(err)
	c := k.http()
	a := Answer{Code: k.snake()}
	if r := ReasonOf(err); r != "" {
		a.Code = strings.ToLower(r)
		if rc, ok := reasonHTTP[r]; ok {
			c = rc
		}
	}
	a.Status, a.Type = c.status, c.typ
	if c.retry {
		a.RetryAfter = retrySeconds
	}
	if k == Internal {
		a.Message, a.Hidden = internalMessage, true
		return a
	}
	a.Message, a.Hidden = publicMessage(err)
	a.Param = explicitField(err)
	if a.Param == "" && k == InvalidArgument {
		a.Param = FieldInMessage(a.Message)
	}
	return a
}

// rpcPrefix is what gRPC puts before a status's message when it is
// printed as an error.
var rpcPrefix = regexp.MustCompile(`rpc error: code = [A-Za-z]+ desc = `)

// transportWords are in the messages gRPC writes itself for a call that
// did not reach a service or lost it: connection errors, resolver and
// balancer failures. They say nothing a client can use and much about
// the cluster.
var transportWords = []string{
	"connection error: desc",
	"transport: ",
	"transport is closing",
	"error reading from server",
	"name resolver",
	"produced zero addresses",
	"last connection error",
	"last resolver error",
	"no children to pick from",
	"grpc: ",
}

// unavailableMessage replaces a transport failure's message.
const unavailableMessage = "a conch service is unavailable; try again"

func publicMessage(err error) (msg string, hidden bool) {
	msg = err.Error()
	var ce *Error
	if s, ok := status.FromError(err); ok && !errors.As(err, &ce) {
		msg = s.Message()
	}
	msg = rpcPrefix.ReplaceAllString(msg, "")
	for _, w := range transportWords {
		if strings.Contains(msg, w) {
			return unavailableMessage, true
		}
	}
	public := HideAddresses(msg)
	return public, public != msg
}

// field is a request field as conch's messages name it: snake_case names
// joined by dots, with list indices and map keys.
var (
	leadingField = regexp.MustCompile(`^([a-z_][a-z0-9_]*(?:\[\d+\]|\.[A-Za-z0-9_-]+)*): `)
	unknownField = regexp.MustCompile(`^unknown field "([^"]+)"`)
)

// FieldInMessage is the request field msg starts with by conch's
// convention, "" for none: a path of snake_case names, list indices and
// map keys followed by ": " ("limits.pids: …", "tools[0].name: …"), or
// `unknown field "path"`.
func FieldInMessage(msg string) string {
	if m := leadingField.FindStringSubmatch(msg); m != nil {
		return m[1]
	}
	if m := unknownField.FindStringSubmatch(msg); m != nil {
		return m[1]
	}
	return ""
}
