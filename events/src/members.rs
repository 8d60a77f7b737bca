//! Writes a value's members into an enclosing JSON object (the payload beside the
//! envelope's keys), leaving out members whose names the enclosing object keeps for itself.

use serde::ser::{self, Impossible, Serialize, SerializeMap, SerializeStruct, Serializer};
use std::marker::PhantomData;

/// A serializer that adds a struct's fields or a map's entries to `map`, skipping `taken`
/// names. `None`, `()` and unit structs add nothing; anything else that is not an object
/// is an error.
pub(crate) struct Members<'m, M> {
    map: &'m mut M,
    taken: &'static [&'static str],
}

impl<'m, M: SerializeMap> Members<'m, M> {
    pub(crate) fn new(map: &'m mut M, taken: &'static [&'static str]) -> Self {
        Members { map, taken }
    }
}

fn not_an_object<E: ser::Error>() -> E {
    E::custom("an event payload must serialize as an object")
}

macro_rules! refuse {
    ($($name:ident: $ty:ty,)*) => {
        $(fn $name(self, _: $ty) -> Result<Self::Ok, Self::Error> {
            Err(not_an_object())
        })*
    };
}

impl<'m, M: SerializeMap> Serializer for Members<'m, M> {
    type Ok = ();
    type Error = M::Error;
    type SerializeSeq = Impossible<(), M::Error>;
    type SerializeTuple = Impossible<(), M::Error>;
    type SerializeTupleStruct = Impossible<(), M::Error>;
    type SerializeTupleVariant = Impossible<(), M::Error>;
    type SerializeMap = MapMembers<'m, M>;
    type SerializeStruct = Self;
    type SerializeStructVariant = Impossible<(), M::Error>;

    refuse! {
        serialize_bool: bool, serialize_i8: i8, serialize_i16: i16, serialize_i32: i32,
        serialize_i64: i64, serialize_u8: u8, serialize_u16: u16, serialize_u32: u32,
        serialize_u64: u64, serialize_f32: f32, serialize_f64: f64, serialize_char: char,
        serialize_str: &str, serialize_bytes: &[u8],
    }

    fn serialize_none(self) -> Result<(), M::Error> {
        Ok(())
    }
    fn serialize_some<T: ?Sized + Serialize>(self, v: &T) -> Result<(), M::Error> {
        v.serialize(self)
    }
    fn serialize_unit(self) -> Result<(), M::Error> {
        Ok(())
    }
    fn serialize_unit_struct(self, _: &'static str) -> Result<(), M::Error> {
        Ok(())
    }
    fn serialize_unit_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
    ) -> Result<(), M::Error> {
        Err(not_an_object())
    }
    fn serialize_newtype_struct<T: ?Sized + Serialize>(
        self,
        _: &'static str,
        v: &T,
    ) -> Result<(), M::Error> {
        v.serialize(self)
    }
    fn serialize_newtype_variant<T: ?Sized + Serialize>(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: &T,
    ) -> Result<(), M::Error> {
        Err(not_an_object())
    }
    fn serialize_seq(self, _: Option<usize>) -> Result<Self::SerializeSeq, M::Error> {
        Err(not_an_object())
    }
    fn serialize_tuple(self, _: usize) -> Result<Self::SerializeTuple, M::Error> {
        Err(not_an_object())
    }
    fn serialize_tuple_struct(
        self,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeTupleStruct, M::Error> {
        Err(not_an_object())
    }
    fn serialize_tuple_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeTupleVariant, M::Error> {
        Err(not_an_object())
    }
    fn serialize_map(self, _: Option<usize>) -> Result<Self::SerializeMap, M::Error> {
        Ok(MapMembers {
            map: self.map,
            taken: self.taken,
            skip: false,
        })
    }
    fn serialize_struct(self, _: &'static str, _: usize) -> Result<Self, M::Error> {
        Ok(self)
    }
    fn serialize_struct_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeStructVariant, M::Error> {
        Err(not_an_object())
    }
}

impl<M: SerializeMap> SerializeStruct for Members<'_, M> {
    type Ok = ();
    type Error = M::Error;

    fn serialize_field<T: ?Sized + Serialize>(
        &mut self,
        key: &'static str,
        value: &T,
    ) -> Result<(), M::Error> {
        if self.taken.contains(&key) {
            return Ok(());
        }
        self.map.serialize_entry(key, value)
    }
    fn end(self) -> Result<(), M::Error> {
        Ok(())
    }
}

/// The entries of a map payload (a struct with flattened members serializes as one).
pub(crate) struct MapMembers<'m, M> {
    map: &'m mut M,
    taken: &'static [&'static str],
    /// The last key was a taken name: its value is left out too.
    skip: bool,
}

impl<M: SerializeMap> SerializeMap for MapMembers<'_, M> {
    type Ok = ();
    type Error = M::Error;

    fn serialize_key<T: ?Sized + Serialize>(&mut self, key: &T) -> Result<(), M::Error> {
        self.skip = key.serialize(Taken::<M::Error>::new(self.taken))?;
        if self.skip {
            return Ok(());
        }
        self.map.serialize_key(key)
    }
    fn serialize_value<T: ?Sized + Serialize>(&mut self, value: &T) -> Result<(), M::Error> {
        if self.skip {
            return Ok(());
        }
        self.map.serialize_value(value)
    }
    fn serialize_entry<K: ?Sized + Serialize, V: ?Sized + Serialize>(
        &mut self,
        key: &K,
        value: &V,
    ) -> Result<(), M::Error> {
        if key.serialize(Taken::<M::Error>::new(self.taken))? {
            return Ok(());
        }
        self.map.serialize_entry(key, value)
    }
    fn end(self) -> Result<(), M::Error> {
        Ok(())
    }
}

/// Whether a map key is one of the taken names (a key that is not a string never is).
struct Taken<E> {
    taken: &'static [&'static str],
    error: PhantomData<E>,
}

impl<E> Taken<E> {
    fn new(taken: &'static [&'static str]) -> Self {
        Taken {
            taken,
            error: PhantomData,
        }
    }
}

macro_rules! not_taken {
    ($($name:ident: $ty:ty,)*) => {
        $(fn $name(self, _: $ty) -> Result<bool, E> {
            Ok(false)
        })*
    };
}

impl<E: ser::Error> Serializer for Taken<E> {
    type Ok = bool;
    type Error = E;
    type SerializeSeq = Impossible<bool, E>;
    type SerializeTuple = Impossible<bool, E>;
    type SerializeTupleStruct = Impossible<bool, E>;
    type SerializeTupleVariant = Impossible<bool, E>;
    type SerializeMap = Impossible<bool, E>;
    type SerializeStruct = Impossible<bool, E>;
    type SerializeStructVariant = Impossible<bool, E>;

    fn serialize_str(self, v: &str) -> Result<bool, E> {
        Ok(self.taken.contains(&v))
    }
    fn serialize_char(self, v: char) -> Result<bool, E> {
        let mut buf = [0; 4];
        let v: &str = v.encode_utf8(&mut buf);
        Ok(self.taken.contains(&v))
    }
    fn serialize_unit_variant(self, _: &'static str, _: u32, v: &'static str) -> Result<bool, E> {
        Ok(self.taken.contains(&v))
    }
    fn serialize_some<T: ?Sized + Serialize>(self, v: &T) -> Result<bool, E> {
        v.serialize(self)
    }
    fn serialize_newtype_struct<T: ?Sized + Serialize>(
        self,
        _: &'static str,
        v: &T,
    ) -> Result<bool, E> {
        v.serialize(self)
    }
    not_taken! {
        serialize_bool: bool, serialize_i8: i8, serialize_i16: i16, serialize_i32: i32,
        serialize_i64: i64, serialize_u8: u8, serialize_u16: u16, serialize_u32: u32,
        serialize_u64: u64, serialize_f32: f32, serialize_f64: f64, serialize_bytes: &[u8],
        serialize_unit_struct: &'static str,
    }
    fn serialize_none(self) -> Result<bool, E> {
        Ok(false)
    }
    fn serialize_unit(self) -> Result<bool, E> {
        Ok(false)
    }
    fn serialize_newtype_variant<T: ?Sized + Serialize>(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: &T,
    ) -> Result<bool, E> {
        Ok(false)
    }
    fn serialize_seq(self, _: Option<usize>) -> Result<Self::SerializeSeq, E> {
        Err(E::custom("a map key must be a string"))
    }
    fn serialize_tuple(self, _: usize) -> Result<Self::SerializeTuple, E> {
        Err(E::custom("a map key must be a string"))
    }
    fn serialize_tuple_struct(
        self,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeTupleStruct, E> {
        Err(E::custom("a map key must be a string"))
    }
    fn serialize_tuple_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeTupleVariant, E> {
        Err(E::custom("a map key must be a string"))
    }
    fn serialize_map(self, _: Option<usize>) -> Result<Self::SerializeMap, E> {
        Err(E::custom("a map key must be a string"))
    }
    fn serialize_struct(self, _: &'static str, _: usize) -> Result<Self::SerializeStruct, E> {
        Err(E::custom("a map key must be a string"))
    }
    fn serialize_struct_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeStructVariant, E> {
        Err(E::custom("a map key must be a string"))
    }
}
