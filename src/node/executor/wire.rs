//! Requests that arrive as wire frames (the node's connections): admin RPCs answered here, Raft
//! RPCs handed to the core under a token whose answer is encoded back into a frame. The
//! wire-edge issue moves this to the connection's shard.

use super::*;

/// Requests that arrived as wire frames: their tokens, and how to answer them.
pub(super) struct WireCalls {
    pub(super) next: Token,
    pub(super) calls: HashMap<Token, (RaftCall, CallReply)>,
}

/// Wire calls take tokens from here on; the simulator's own tokens stay below.
pub(super) const WIRE_TOKENS_FROM: Token = 1 << 62;

impl WireCalls {
    /// A token no wire call uses (the application's membership requests take these).
    pub(super) fn next_token(&mut self) -> Token {
        let token = self.next;
        self.next += 1;
        token
    }

    pub(super) fn register(&mut self, call: RaftCall, reply: CallReply) -> Token {
        let token = self.next;
        self.next += 1;
        self.calls.insert(token, (call, reply));
        token
    }

    /// Encodes and sends the answer if `token` is a wire call's.
    pub(super) fn answer(&mut self, token: Token, response: &Response, data: &[Bytes]) -> bool {
        let Some((call, reply)) = self.calls.remove(&token) else {
            return false;
        };
        let (id, version) = (call.correlation_id, call.response_header_version);
        let frame = SharedFrame::encode(id, version, data.to_vec(), |w, hole| {
            raft_rpc::encode_response(response, call.version, hole, w)
        });
        let _ = reply.send(Some(frame));
        true
    }
}

impl<S: Storage + 'static, T: Transport, C: Clock> Executor<S, T, C> {
    /// A wire request: admin RPCs are answered here, Raft RPCs go to the core.
    pub(super) fn handle_call(&mut self, call: RaftCall, reply: CallReply) {
        let now = self.now();
        let admin =
            crate::node::admin::answer(&mut self.raft.borrow_mut(), &call, &self.cluster_id, now);
        if let Some(frame) = admin {
            let _ = reply.send(Some(SharedFrame::whole(frame)));
            return;
        }
        let Some(request) = raft_rpc::request_from_wire(&call.body) else {
            let frame = crate::node::admin::error_frame(&call, ErrorCode::INVALID_REQUEST);
            let _ = reply.send(Some(SharedFrame::whole(frame)));
            return;
        };
        let token = self.wire.register(call, reply);
        self.step(Input::Request { token, request });
    }
}
