package errs

import (
	"context"
	"log/slog"

	"google.golang.org/grpc"
)

// UnaryServerInterceptor converts handler errors with ToStatus and logs the
// full error of those whose detail is hidden from the peer. A nil log means
// slog.Default().
func UnaryServerInterceptor(log *slog.Logger) grpc.UnaryServerInterceptor {
	log = orDefault(log)
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		resp, err := handler(ctx, req)
		if err != nil {
			return resp, convert(ctx, log, info.FullMethod, err)
		}
		return resp, nil
	}
}

// StreamServerInterceptor converts handler errors with ToStatus and logs
// the full error of those whose detail is hidden from the peer. A nil log
// means slog.Default().
func StreamServerInterceptor(log *slog.Logger) grpc.StreamServerInterceptor {
	log = orDefault(log)
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		if err := handler(srv, ss); err != nil {
			return convert(ss.Context(), log, info.FullMethod, err)
		}
		return nil
	}
}

func convert(ctx context.Context, log *slog.Logger, method string, err error) error {
	st, hidden := toStatus(err)
	if hidden {
		log.ErrorContext(ctx, "grpc handler failed", slog.String("method", method), slog.Any("error", err))
	}
	return st.Err()
}

func orDefault(log *slog.Logger) *slog.Logger {
	if log == nil {
		return slog.Default()
	}
	return log
}
