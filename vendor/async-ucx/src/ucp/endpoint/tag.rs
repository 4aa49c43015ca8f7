use super::*;
use std::io::{IoSlice, IoSliceMut};

impl Worker {
    /// Receives a message with `tag`.
    pub async fn tag_recv(&self, tag: u64, buf: &mut [MaybeUninit<u8>]) -> Result<usize, Error> {
        self.tag_recv_mask(tag, u64::max_value(), buf)
            .await
            .map(|info| info.1)
    }

    /// Receives a message with `tag` and `tag_mask`.
    pub async fn tag_recv_mask(
        &self,
        tag: u64,
        tag_mask: u64,
        buf: &mut [MaybeUninit<u8>],
    ) -> Result<(u64, usize), Error> {
        trace!(
            "tag_recv: worker={:?}, tag={}, mask={:#x} len={}",
            self.handle,
            tag,
            tag_mask,
            buf.len()
        );
        unsafe extern "C" fn callback(
            request: *mut c_void,
            status: ucs_status_t,
            info: *mut ucp_tag_recv_info,
        ) {
            let length = (*info).length;
            trace!(
                "tag_recv: complete. req={:?}, status={:?}, len={}",
                request,
                status,
                length
            );
            let request = &mut *(request as *mut Request);
            request.waker.wake();
        }
        let status = unsafe {
            ucp_tag_recv_nb(
                self.handle,
                buf.as_mut_ptr() as _,
                buf.len() as _,
                ucp_dt_make_contig(1),
                tag,
                tag_mask,
                Some(callback),
            )
        };

        Error::from_ptr(status)?;
        RequestHandle {
            ptr: status,
            poll_fn: poll_tag,
            cancel_on: Some(self.handle),
        }
        .await
    }

    /// Like `tag_recv`, except that it reads into a slice of buffers.
    pub async fn tag_recv_vectored(
        &self,
        tag: u64,
        iov: &mut [IoSliceMut<'_>],
    ) -> Result<usize, Error> {
        trace!(
            "tag_recv_vectored: worker={:?} iov.len={}",
            self.handle,
            iov.len()
        );
        unsafe extern "C" fn callback(
            request: *mut c_void,
            status: ucs_status_t,
            info: *mut ucp_tag_recv_info,
        ) {
            let length = (*info).length;
            trace!(
                "tag_recv_vectored: complete. req={:?}, status={:?}, len={}",
                request,
                status,
                length
            );
            let request = &mut *(request as *mut Request);
            request.waker.wake();
        }
        let status = unsafe {
            ucp_tag_recv_nb(
                self.handle,
                iov.as_ptr() as _,
                iov.len() as _,
                ucp_dt_type::UCP_DATATYPE_IOV as _,
                tag,
                u64::max_value(),
                Some(callback),
            )
        };
        Error::from_ptr(status)?;
        RequestHandle {
            ptr: status,
            poll_fn: poll_tag,
            cancel_on: Some(self.handle),
        }
        .await
        .map(|info| info.1)
    }
}

impl Endpoint {
    /// Sends a messages with `tag`.
    pub async fn tag_send(&self, tag: u64, buf: &[u8]) -> Result<usize, Error> {
        trace!("tag_send: endpoint={:?} len={}", self.handle, buf.len());
        unsafe extern "C" fn callback(request: *mut c_void, status: ucs_status_t) {
            trace!("tag_send: complete. req={:?}, status={:?}", request, status);
            let request = &mut *(request as *mut Request);
            request.waker.wake();
        }
        let status = unsafe {
            ucp_tag_send_nb(
                self.get_handle()?,
                buf.as_ptr() as _,
                buf.len() as _,
                ucp_dt_make_contig(1),
                tag,
                Some(callback),
            )
        };
        if status.is_null() {
            trace!("tag_send: complete");
        } else if UCS_PTR_IS_PTR(status) {
            RequestHandle {
                ptr: status,
                poll_fn: poll_normal,
                cancel_on: None,
            }
            .await?;
        } else {
            return Err(Error::from_ptr(status).unwrap_err());
        }
        Ok(buf.len())
    }

    /// Like `tag_send`, except that it reads into a slice of buffers.
    pub async fn tag_send_vectored(&self, tag: u64, iov: &[IoSlice<'_>]) -> Result<usize, Error> {
        trace!(
            "tag_send_vectored: endpoint={:?} iov.len={}",
            self.handle,
            iov.len()
        );
        unsafe extern "C" fn callback(request: *mut c_void, status: ucs_status_t) {
            trace!(
                "tag_send_vectored: complete. req={:?}, status={:?}",
                request,
                status
            );
            let request = &mut *(request as *mut Request);
            request.waker.wake();
        }
        let status = unsafe {
            ucp_tag_send_nb(
                self.get_handle()?,
                iov.as_ptr() as _,
                iov.len() as _,
                ucp_dt_type::UCP_DATATYPE_IOV as _,
                tag,
                Some(callback),
            )
        };
        let total_len = iov.iter().map(|v| v.len()).sum();
        if status.is_null() {
            trace!("tag_send_vectored: complete");
        } else if UCS_PTR_IS_PTR(status) {
            RequestHandle {
                ptr: status,
                poll_fn: poll_normal,
                cancel_on: None,
            }
            .await?;
        } else {
            return Err(Error::from_ptr(status).unwrap_err());
        }
        Ok(total_len)
    }
}

/// madfs patch: a tag receive posted now and completed later, that the caller may move
/// (it is `Unpin`: a spawned task can take over a receive a first task began) and cancel
/// explicitly, learning whether the receive is over. Dropping it cancels a receive that has
/// not matched a message yet and frees the request; one whose transfer is under way goes
/// on writing into the buffer, so the owner of the buffer must keep it until
/// [`PostedRecv::cancel`] or a poll says the receive is over.
pub struct PostedRecv {
    handle: RequestHandle<Result<(u64, usize), Error>>,
}

impl PostedRecv {
    /// Cancels the receive if it has not matched a message yet. Returns whether it is over
    /// now (cancelled, completed or failed): then the buffer is no longer written.
    pub fn cancel(&mut self) -> bool {
        unsafe {
            if ucp_request_check_status(self.handle.ptr as _) == ucs_status_t::UCS_INPROGRESS {
                if let Some(worker) = self.handle.cancel_on {
                    ucp_request_cancel(worker, self.handle.ptr as _);
                }
            }
            ucp_request_check_status(self.handle.ptr as _) != ucs_status_t::UCS_INPROGRESS
        }
    }

    /// Whether the receive is over (completed, failed or cancelled).
    pub fn is_done(&self) -> bool {
        unsafe { ucp_request_check_status(self.handle.ptr as _) != ucs_status_t::UCS_INPROGRESS }
    }
}

impl Future for PostedRecv {
    type Output = Result<(u64, usize), Error>;
    fn poll(mut self: Pin<&mut Self>, cx: &mut std::task::Context) -> Poll<Self::Output> {
        Pin::new(&mut self.handle).poll(cx)
    }
}

/// madfs patch: a tag send posted now and completed later, movable like [`PostedRecv`].
/// Dropping it before it completes frees the request while UCX may still read the buffer:
/// the owner keeps the buffer until a poll says the send is over (closing the endpoint with
/// force completes its sends with an error).
pub struct PostedSend {
    handle: Option<RequestHandle<Result<(), Error>>>,
}

impl PostedSend {
    /// Whether the send is over (completed or failed).
    pub fn is_done(&self) -> bool {
        match &self.handle {
            None => true,
            Some(h) => unsafe {
                ucp_request_check_status(h.ptr as _) != ucs_status_t::UCS_INPROGRESS
            },
        }
    }
}

impl Future for PostedSend {
    type Output = Result<(), Error>;
    fn poll(mut self: Pin<&mut Self>, cx: &mut std::task::Context) -> Poll<Self::Output> {
        match &mut self.handle {
            None => Poll::Ready(Ok(())),
            Some(h) => Pin::new(h).poll(cx),
        }
    }
}

impl Worker {
    /// madfs patch: posts a receive of a message with `tag` under `tag_mask` into `len` bytes
    /// at `buf`, to be awaited (and moved) as a [`PostedRecv`].
    ///
    /// # Safety
    /// `buf..buf+len` must stay valid and otherwise unused until the receive is over (a poll
    /// returned `Ready`, [`PostedRecv::cancel`] or [`PostedRecv::is_done`] returned true),
    /// also when the `PostedRecv` is dropped before that.
    pub unsafe fn tag_recv_posted(
        &self,
        tag: u64,
        tag_mask: u64,
        buf: *mut MaybeUninit<u8>,
        len: usize,
    ) -> Result<PostedRecv, Error> {
        unsafe extern "C" fn callback(
            request: *mut c_void,
            _status: ucs_status_t,
            _info: *mut ucp_tag_recv_info,
        ) {
            let request = &mut *(request as *mut Request);
            request.waker.wake();
        }
        let status = ucp_tag_recv_nb(
            self.handle,
            buf as _,
            len as _,
            ucp_dt_make_contig(1),
            tag,
            tag_mask,
            Some(callback),
        );
        Error::from_ptr(status)?;
        Ok(PostedRecv {
            handle: RequestHandle {
                ptr: status,
                poll_fn: poll_tag,
                cancel_on: Some(self.handle),
            },
        })
    }
}

impl Endpoint {
    /// madfs patch: posts a send of `len` contiguous bytes at `buf` with `tag`, to be awaited
    /// (and moved) as a [`PostedSend`].
    ///
    /// # Safety
    /// The bytes must stay valid and unchanged until the send is over (see [`PostedSend`]).
    pub unsafe fn tag_send_posted(
        &self,
        tag: u64,
        buf: *const u8,
        len: usize,
    ) -> Result<PostedSend, Error> {
        self.send_posted(tag, buf as _, len, ucp_dt_make_contig(1))
    }

    /// madfs patch: like [`Endpoint::tag_send_posted`] for the pieces `iov`.
    ///
    /// # Safety
    /// The slice `iov` itself (UCX keeps a pointer to it) and every byte it names must stay
    /// valid and unchanged until the send is over (see [`PostedSend`]).
    pub unsafe fn tag_send_vectored_posted(
        &self,
        tag: u64,
        iov: *const IoSlice<'_>,
        count: usize,
    ) -> Result<PostedSend, Error> {
        self.send_posted(
            tag,
            iov as _,
            count,
            ucp_dt_type::UCP_DATATYPE_IOV as _,
        )
    }

    unsafe fn send_posted(
        &self,
        tag: u64,
        buf: *const c_void,
        count: usize,
        datatype: ucp_datatype_t,
    ) -> Result<PostedSend, Error> {
        unsafe extern "C" fn callback(request: *mut c_void, _status: ucs_status_t) {
            let request = &mut *(request as *mut Request);
            request.waker.wake();
        }
        let status = ucp_tag_send_nb(
            self.get_handle()?,
            buf,
            count as _,
            datatype,
            tag,
            Some(callback),
        );
        if status.is_null() {
            Ok(PostedSend { handle: None })
        } else if UCS_PTR_IS_PTR(status) {
            Ok(PostedSend {
                handle: Some(RequestHandle {
                    ptr: status,
                    poll_fn: poll_normal,
                    cancel_on: None,
                }),
            })
        } else {
            Err(Error::from_ptr(status).unwrap_err())
        }
    }
}

unsafe fn poll_tag(ptr: ucs_status_ptr_t) -> Poll<Result<(u64, usize), Error>> {
    let mut info = MaybeUninit::<ucp_tag_recv_info>::uninit();
    let status = ucp_tag_recv_request_test(ptr as _, info.as_mut_ptr() as _);
    match status {
        ucs_status_t::UCS_INPROGRESS => Poll::Pending,
        ucs_status_t::UCS_OK => {
            let info = info.assume_init();
            Poll::Ready(Ok((info.sender_tag, info.length as usize)))
        }
        status => Poll::Ready(Err(Error::from_error(status))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test_log::test]
    fn tag() {
        for i in 0..20_usize {
            spawn_thread!(_tag(4 << i)).join().unwrap();
        }
    }

    async fn _tag(msg_size: usize) {
        let context1 = Context::new().unwrap();
        let worker1 = context1.create_worker().unwrap();
        let context2 = Context::new().unwrap();
        let worker2 = context2.create_worker().unwrap();
        tokio::task::spawn_local(worker1.clone().polling());
        tokio::task::spawn_local(worker2.clone().polling());

        // connect with each other
        let mut listener = worker1
            .create_listener("0.0.0.0:0".parse().unwrap())
            .unwrap();
        let listen_port = listener.socket_addr().unwrap().port();
        println!("listen at port {}", listen_port);
        let mut addr: SocketAddr = "127.0.0.1:0".parse().unwrap();
        addr.set_port(listen_port);

        let (endpoint1, endpoint2) = tokio::join!(
            async {
                let conn1 = listener.next().await;
                worker1.accept(conn1).await.unwrap()
            },
            async { worker2.connect_socket(addr).await.unwrap() },
        );

        // send tag message
        tokio::join!(
            async {
                // send
                let mut buf = vec![0; msg_size];
                endpoint2.tag_send(1, &mut buf).await.unwrap();
                println!("tag sended");
            },
            async {
                // recv
                let mut buf = vec![MaybeUninit::uninit(); msg_size];
                worker1.tag_recv(1, &mut buf).await.unwrap();
                println!("tag recved");
            }
        );

        assert_eq!(endpoint1.get_rc(), (1, 1));
        assert_eq!(endpoint2.get_rc(), (1, 1));
        assert_eq!(endpoint1.close(false).await, Ok(()));
        assert_eq!(endpoint2.close(false).await, Err(Error::ConnectionReset));
        assert_eq!(endpoint1.get_rc(), (1, 0));
        assert_eq!(endpoint2.get_rc(), (1, 1));
        assert_eq!(endpoint2.close(true).await, Ok(()));
        assert_eq!(endpoint2.get_rc(), (1, 0));
    }
}
