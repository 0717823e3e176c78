package egressproxy

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/netip"
)

// SOCKS5 (RFC 1928), CONNECT only, without authentication.
const (
	socksVersion   = 5
	socksNoAuth    = 0
	socksNoMethods = 0xff
	socksConnect   = 1
	atypIPv4       = 1
	atypDomain     = 3
	atypIPv6       = 4

	repSucceeded       = 0
	repFailure         = 1
	repNotAllowed      = 2
	repHostUnreachable = 4
	repCmdUnsupported  = 7
	repAtypUnsupported = 8
)

func (s *session) socks(ctx context.Context, c net.Conn, br *bufio.Reader) {
	var h [2]byte
	if _, err := io.ReadFull(br, h[:]); err != nil {
		return
	}
	methods := make([]byte, h[1])
	if _, err := io.ReadFull(br, methods); err != nil {
		return
	}
	noAuth := false
	for _, m := range methods {
		noAuth = noAuth || m == socksNoAuth
	}
	if !noAuth {
		_, _ = c.Write([]byte{socksVersion, socksNoMethods})
		return
	}
	if _, err := c.Write([]byte{socksVersion, socksNoAuth}); err != nil {
		return
	}
	var req [4]byte
	if _, err := io.ReadFull(br, req[:]); err != nil || req[0] != socksVersion {
		return
	}
	var host string
	switch req[3] {
	case atypIPv4:
		var b [4]byte
		if _, err := io.ReadFull(br, b[:]); err != nil {
			return
		}
		host = netip.AddrFrom4(b).String()
	case atypIPv6:
		var b [16]byte
		if _, err := io.ReadFull(br, b[:]); err != nil {
			return
		}
		host = netip.AddrFrom16(b).Unmap().String()
	case atypDomain:
		n, err := br.ReadByte()
		if err != nil {
			return
		}
		b := make([]byte, n)
		if _, err := io.ReadFull(br, b); err != nil {
			return
		}
		host = string(b)
	default:
		socksReply(c, repAtypUnsupported)
		return
	}
	var p [2]byte
	if _, err := io.ReadFull(br, p[:]); err != nil {
		return
	}
	if req[1] != socksConnect {
		socksReply(c, repCmdUnsupported)
		return
	}
	port := int(binary.BigEndian.Uint16(p[:]))
	up, done, err := s.connect(ctx, "socks5", host, port)
	if err != nil {
		var r *Refused
		var l *Limited
		switch {
		case errors.As(err, &r), errors.As(err, &l):
			socksReply(c, repNotAllowed)
		case isResolveError(err):
			socksReply(c, repHostUnreachable)
		default:
			socksReply(c, repFailure)
		}
		return
	}
	s.track(up)
	defer s.untrack(up)
	if !socksReply(c, repSucceeded) {
		done(0, 0, nil)
		return
	}
	sent, received := s.tunnel(c, br, up)
	done(sent, received, nil)
}

func socksReply(c net.Conn, rep byte) bool {
	_, err := c.Write([]byte{socksVersion, rep, 0, atypIPv4, 0, 0, 0, 0, 0, 0})
	return err == nil
}

func isResolveError(err error) bool {
	var d *net.DNSError
	return errors.As(err, &d)
}
