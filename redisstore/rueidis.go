package redisstore

import (
	"context"
	"fmt"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice/redisscript"
)

// rueidisClient adapts a rueidis.Client.
type rueidisClient struct{ c rueidis.Client }

// NewRueidis adapts a rueidis client, single node or Cluster, that the
// caller made and closes (Dial makes and owns one). The store does not
// close it. (rueidis retries read-only commands only: never a script
// call, which may have spent.)
func NewRueidis(c rueidis.Client) Client { return rueidisClient{c} }

func (r rueidisClient) EvalSHA(ctx context.Context, sha string, keys, args []string) ([]int64, error) {
	return rueidisReply(r.c.Do(ctx, r.c.B().Evalsha().Sha1(sha).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build()))
}

func (r rueidisClient) Eval(ctx context.Context, script string, keys, args []string) ([]int64, error) {
	return rueidisReply(r.c.Do(ctx, r.c.B().Eval().Script(script).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build()))
}

func (r rueidisClient) Cluster() bool { return r.c.Mode() == rueidis.ClientModeCluster }

// rueidisReply maps a rueidis result to the Client contract: an error
// reply is a *redisscript.ReplyError, a reply that is not an integer array
// wraps redisscript.ErrBadReply, any other error (the transport, the
// context) is returned as it is.
func rueidisReply(res rueidis.RedisResult) ([]int64, error) {
	if err := res.Error(); err != nil {
		if re, ok := rueidis.IsRedisErr(err); ok {
			return nil, &redisscript.ReplyError{Msg: re.Error()}
		}
		return nil, err
	}
	v, err := res.AsIntSlice()
	if err != nil {
		return nil, fmt.Errorf("%w: %v", redisscript.ErrBadReply, err)
	}
	return v, nil
}
